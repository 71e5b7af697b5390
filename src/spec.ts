import { readFileSync } from 'node:fs';
import { projectFile } from './project-file.ts';

/** openapi.yaml as written, and as the JSON object that generated/openapi.json holds. */
export const specYaml: string = readFileSync(projectFile('openapi.yaml'), 'utf8');
export const specDocument: Record<string, unknown> = JSON.parse(
  readFileSync(projectFile('generated/openapi.json'), 'utf8'),
);

/** asyncapi.yaml as written: the realtime (socket.io) protocol. */
export const asyncapiYaml: string = readFileSync(projectFile('asyncapi.yaml'), 'utf8');
