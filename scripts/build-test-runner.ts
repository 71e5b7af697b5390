/**
 * Builds tap with the plugins .taprc names (run by `prepare`, after every install). An install leaves
 * tap's default plugins built, its TypeScript loader among them; tap rebuilds by itself on its first
 * run, but that run still starts every test file with the loader, which costs about 4 s of CPU per
 * file. Never fails an install: without tap (a production install) there is nothing to build.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

const tap = path.resolve(import.meta.dirname, '../node_modules/.bin/tap');
if (!existsSync(tap)) {
  console.log('tap is not installed (a production install): the test runner is not built');
} else {
  const built = spawnSync(tap, ['build'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (built.status === 0) console.log('Test runner built with the plugins of .taprc');
  else console.warn('tap build failed: the first `npm test` rebuilds it, with every file a few seconds slower');
}
