/**
 * Writes generated/ from openapi.yaml: the TypeScript types of the contract (openapi-typescript),
 * the contract's operation and error-code lists, and the spec as JSON for the server to load; and
 * from asyncapi.yaml the types of the socket protocol's payloads.
 * With --check it writes nothing and exits 1 when a file in generated/ differs from what it would write.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import { parse } from 'yaml';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const specPath = path.join(root, 'openapi.yaml');
const outDir = path.join(root, 'generated');
const asyncapiPath = path.join(root, 'asyncapi.yaml');
const banner = '// Generated from openapi.yaml by `npm run generate`. Do not edit.\n';
const asyncapiBanner = '// Generated from asyncapi.yaml by `npm run generate`. Do not edit.\n';

type SpecOperation = {
  operationId?: string;
  tags?: string[];
  security?: unknown[];
  requestBody?: { required?: boolean };
  'x-body-limit'?: number;
  /** The query is not the service's to define (a provider's redirect): unknown parameters are accepted. */
  'x-open-query'?: boolean;
  /** The roles that may call the operation (any authenticated caller when absent). */
  'x-roles'?: string[];
  /** The named rate limits the operation counts against, and what each counts by. */
  'x-rate-limit'?: Array<{ name: string; by: string }>;
  /** `aal1`: callable before the second step (the account's other operations need its level). */
  'x-aal'?: string;
  responses?: Record<string, unknown>;
};

const roles = ['admin', 'user'];
const rateLimitKeys = ['ip', 'user'];
type Spec = {
  paths: Record<string, Record<string, SpecOperation>>;
  components: { schemas: { ErrorCode: { enum: string[]; description: string } } };
};

/**
 * The error catalogue: each code's status and meaning, read from the table in ErrorCode's
 * description (`| `CODE` | status | meaning |`), which must list every code of the enum once.
 */
function errorCatalogue(schema: {
  enum: string[];
  description: string;
}): Record<string, { status: number; message: string }> {
  const catalogue: Record<string, { status: number; message: string }> = {};
  for (const line of schema.description.split('\n')) {
    const row = /^\| `([A-Z_]+)` \| ([0-9]{3}) \| (.+) \|$/.exec(line.trim());
    if (row === null) continue;
    const [, code, status, meaning] = row as unknown as [string, string, string, string];
    if (code in catalogue) throw new Error(`ErrorCode ${code} is listed twice in its description's table`);
    catalogue[code] = { status: Number(status), message: meaning.replaceAll('`', '') };
  }
  for (const code of schema.enum) {
    if (!(code in catalogue))
      throw new Error(`ErrorCode ${code} has no row (status, meaning) in its description's table`);
  }
  for (const code of Object.keys(catalogue)) {
    if (!schema.enum.includes(code)) throw new Error(`ErrorCode's table lists ${code}, which is not in its enum`);
  }
  return catalogue;
}

const methods = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

function contractModule(spec: Spec): string {
  const operations: Record<
    string,
    {
      method: string;
      path: string;
      tag: string;
      secured: boolean;
      bearer: boolean;
      optionalBearer: boolean;
      bodyRequired: boolean;
      bodyLimit: number | null;
      openQuery: boolean;
      roles: string[] | null;
      rateLimits: Array<{ name: string; by: string }>;
      aal: 'aal1' | 'account';
    }
  > = {};
  for (const [route, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!methods.includes(method)) continue;
      if (!op.operationId) throw new Error(`${method.toUpperCase()} ${route} has no operationId`);
      // Roles, limits by user and the assurance level read the access token's claims: such an operation must require one.
      const security = (op.security ?? []) as object[];
      const bearer = security.length > 0 && security.every((s) => 'bearerAuth' in s);
      // `[{bearerAuth: []}, {}]`: an access token when one is sent (it must then verify), else anyone.
      const optionalBearer =
        security.length === 2 &&
        'bearerAuth' in (security[0] as object) &&
        Object.keys(security[1] as object).length === 0;
      if (security.some((s) => Object.keys(s).length === 0) && !optionalBearer) {
        throw new Error(
          `${op.operationId}: an anonymous alternative ({}) is declared only after bearerAuth, as [{bearerAuth: []}, {}]`,
        );
      }
      operations[op.operationId] = {
        method: method.toUpperCase(),
        path: route,
        tag: op.tags?.[0] ?? '',
        // A credential is required: declared, with no anonymous alternative.
        secured: security.length > 0 && !optionalBearer,
        bearer,
        optionalBearer,
        bodyRequired: op.requestBody?.required === true,
        bodyLimit: op['x-body-limit'] ?? null,
        openQuery: op['x-open-query'] === true,
        roles: op['x-roles'] ?? null,
        rateLimits: op['x-rate-limit'] ?? [],
        // `account`: the account's level (aal2 once it has a verified factor); `aal1`: any session.
        aal: op['x-aal'] === 'aal1' ? 'aal1' : 'account',
      };
      for (const role of op['x-roles'] ?? []) {
        if (!roles.includes(role)) throw new Error(`${op.operationId}: x-roles names ${role}, not one of ${roles}`);
      }
      if (op['x-roles'] !== undefined && !bearer) {
        throw new Error(`${op.operationId} declares x-roles but not security bearerAuth: roles are the token's`);
      }
      if (op['x-aal'] !== undefined && (op['x-aal'] !== 'aal1' || !(bearer || optionalBearer))) {
        throw new Error(
          `${op.operationId}: x-aal is aal1 (callable before the second step), on a bearerAuth operation`,
        );
      }
      if (optionalBearer && op['x-aal'] !== 'aal1') {
        throw new Error(`${op.operationId}: an operation with an optional access token is x-aal: aal1`);
      }
      if (bearer && op['x-aal'] !== 'aal1' && op.responses?.['403'] === undefined) {
        throw new Error(`${op.operationId} may answer 403 MFA_REQUIRED (it is not x-aal: aal1) but declares no 403`);
      }
      if ((op['x-rate-limit'] ?? []).length > 1) {
        throw new Error(`${op.operationId}: one x-rate-limit per operation is applied; it declares more`);
      }
      for (const limit of op['x-rate-limit'] ?? []) {
        if (!rateLimitKeys.includes(limit.by) || !/^[a-z][A-Za-z]*$/.test(limit.name)) {
          throw new Error(`${op.operationId}: each x-rate-limit is {name, by: ${rateLimitKeys.join(' | ')}}`);
        }
        if (limit.by === 'user' && !bearer) {
          throw new Error(`${op.operationId}: a limit by user needs security bearerAuth (the token's user)`);
        }
      }
      if (op.requestBody && typeof op['x-body-limit'] !== 'number') {
        throw new Error(`${op.operationId} takes a body but declares no x-body-limit (bytes)`);
      }
    }
  }
  const errorCodes = spec.components.schemas.ErrorCode.enum;
  const catalogue = errorCatalogue(spec.components.schemas.ErrorCode);
  return `${banner}
/** Every operation of the contract, by operationId. */
export const operations = ${JSON.stringify(operations, null, 2)} as const;

export type OperationId = keyof typeof operations;

export const operationIds = Object.keys(operations) as OperationId[];

/** The named rate limits that operations declare in x-rate-limit. */
export type RateLimitName = (typeof operations)[OperationId]['rateLimits'][number]['name'];

/** The roles operations may require in x-roles. */
export type Role = ${roles.map((r) => `'${r}'`).join(' | ')};

/** The stable error codes of the Error schema (components.schemas.ErrorCode). */
export const errorCodes = ${JSON.stringify(errorCodes, null, 2)} as const;

export type ErrorCode = (typeof errorCodes)[number];

/** Each error code's HTTP status and default message, from the table in ErrorCode's description. */
export const errorCatalogue: Record<ErrorCode, { readonly status: number; readonly message: string }> = ${JSON.stringify(catalogue, null, 2)};
`;
}

async function render(): Promise<Record<string, string>> {
  const yamlText = fs.readFileSync(specPath, 'utf8');
  const spec = parse(yamlText) as Spec;
  // defaultNonNullable off: a property with a default (encoding_format) stays optional for callers,
  // which is what the spec means; the server applies the default.
  const ast = await openapiTS(new URL(`file://${specPath}`), { alphabetize: false, defaultNonNullable: false });
  // The AsyncAPI payload schemas are JSON Schema, as OpenAPI 3.1's are: openapi-typescript types
  // them when they are presented as the components of an (otherwise empty) OpenAPI document.
  const asyncapi = parse(fs.readFileSync(asyncapiPath, 'utf8')) as { components: { schemas: unknown } };
  const payloads = await openapiTS(
    {
      openapi: '3.1.0',
      info: { title: 'asyncapi.yaml payloads', version: '0' },
      paths: {},
      components: { schemas: asyncapi.components.schemas },
    } as never,
    { alphabetize: false, defaultNonNullable: false },
  );
  return {
    'asyncapi.ts': `${asyncapiBanner}${astToString(payloads)}`,
    'openapi.ts': `${banner}${astToString(ast)}`,
    'contract.ts': contractModule(spec),
    'openapi.json': `${JSON.stringify(spec, null, 2)}\n`,
  };
}

const check = process.argv.includes('--check');
const files = await render();
const stale: string[] = [];
for (const [name, content] of Object.entries(files)) {
  const target = path.join(outDir, name);
  const current = fs.existsSync(target) ? fs.readFileSync(target, 'utf8') : null;
  if (current === content) continue;
  if (check) stale.push(`generated/${name}`);
  else {
    fs.mkdirSync(outDir, { recursive: true });
    fs.writeFileSync(target, content);
    console.log(`wrote generated/${name}`);
  }
}
if (check) {
  if (stale.length > 0) {
    console.error(`generated/ is stale (${stale.join(', ')}): run npm run generate and commit the result`);
    process.exit(1);
  }
  console.log('generated/ is up to date with openapi.yaml and asyncapi.yaml');
}
