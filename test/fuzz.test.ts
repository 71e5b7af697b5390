// Property-based fuzzing from the spec, first share of the operations (test/helpers/fuzz-run.ts
// says what is fuzzed and how; test/fuzz-more.test.ts and test/fuzz-rest.test.ts run the others).
import { fuzzShare } from './helpers/fuzz-run.ts';

fuzzShare(0, 3, 'test/fuzz.test.ts');
