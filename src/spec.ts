import { readFileSync } from 'node:fs';

/** openapi.yaml as written, and as the JSON object that generated/openapi.json holds. */
export const specYaml: string = readFileSync(new URL('../openapi.yaml', import.meta.url), 'utf8');
export const specDocument: Record<string, unknown> = JSON.parse(
  readFileSync(new URL('../generated/openapi.json', import.meta.url), 'utf8'),
);
