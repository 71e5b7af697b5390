// tap `before`: forget the previous run's exercised responses.
import { rmSync } from 'node:fs';
import { coverageDir } from '../helpers/contract-check.ts';

rmSync(coverageDir, { recursive: true, force: true });
