/**
 * An id as the contract's `uuid` format admits it (ajv-formats also takes the `urn:uuid:` form), in
 * the plain form PostgreSQL's uuid type takes.
 */
export function plainUuid(id: string): string {
  return id.replace(/^urn:uuid:/i, '');
}
