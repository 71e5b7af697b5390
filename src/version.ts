import { readFileSync } from 'node:fs';
import { projectFile } from './project-file.ts';

/** The service's version, from package.json. */
export const version: string = (JSON.parse(readFileSync(projectFile('package.json'), 'utf8')) as { version: string })
  .version;
