// Property-based fuzzing from the spec, first share of the operations (test/helpers/fuzz-run.ts
// says what is fuzzed and how; test/fuzz-more.test.ts runs the other share).
import { fuzzShare } from './helpers/fuzz-run.ts';

fuzzShare(0, 2, 'test/fuzz.test.ts');
