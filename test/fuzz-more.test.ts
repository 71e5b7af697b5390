// Property-based fuzzing from the spec, second share of the operations (test/helpers/fuzz-run.ts
// says what is fuzzed and how; test/fuzz.test.ts runs the first share, the generator's check and
// the fixed regressions).
import { fuzzShare } from './helpers/fuzz-run.ts';

fuzzShare(1, 3, 'test/fuzz-more.test.ts');
