/** Prepares the embedded database's template so that a first start on an empty DATA_DIR is quick (run by `prepare`). */
import { writeTemplate } from '../src/db/pglite-template.ts';

try {
  console.log(`PGlite template ready: ${await writeTemplate()}`);
} catch (err) {
  // Never fail an install over this: without the template the first start only takes longer.
  console.warn(`PGlite template not prepared (${(err as Error).message}); the first start will run initdb instead`);
}
