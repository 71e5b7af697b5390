import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Test } from 'tap';
import { specDocument } from '../../src/spec.ts';

const schemas = (specDocument.components as { schemas: Record<string, unknown> }).schemas;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema({ $id: 'spec', components: { schemas } });

/** Asserts that `value` is valid against components.schemas[name] of openapi.yaml. */
export function assertMatchesSchema(t: Test, value: unknown, name: string): void {
  const validate = ajv.getSchema(`spec#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name} in openapi.yaml`);
  const ok = validate(value);
  t.ok(ok, `matches the spec's ${name}`, ok ? {} : { errors: validate.errors?.slice(0, 5) });
}
