import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Test } from 'tap';
import { specDocument } from '../../src/spec.ts';

// The whole of openapi.yaml as one schema document, so that any JSON pointer into it (a component
// schema, a response's schema) compiles with its $refs resolved against the spec.
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema({ ...specDocument, $id: 'spec' });

const pointerSegment = (part: string) => part.replaceAll('~', '~0').replaceAll('/', '~1');

/** The validator of the schema at a JSON pointer into openapi.yaml, given as path segments. */
export function specValidator(...segments: string[]): ValidateFunction {
  const pointer = `spec#/${segments.map(pointerSegment).join('/')}`;
  const validate = ajv.getSchema(pointer);
  if (!validate) throw new Error(`no schema at ${pointer} in openapi.yaml`);
  return validate;
}

/** Asserts that `value` is valid against components.schemas[name] of openapi.yaml. */
export function assertMatchesSchema(t: Test, value: unknown, name: string): void {
  const validate = specValidator('components', 'schemas', name);
  const ok = validate(value);
  t.ok(ok, `matches the spec's ${name}`, ok ? {} : { errors: validate.errors?.slice(0, 5) });
}
