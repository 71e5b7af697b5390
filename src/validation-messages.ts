import { PROFILE_NAME_PATTERN } from './auth/profile-name.ts';
import { printable } from './json-values.ts';

/**
 * Ajv's validation failures in words: which field failed, and what it must be. The one issue worth
 * reporting is picked from Ajv's list (pickValidationIssue) and described (describeValidationIssue).
 */

// Friendlier words for the patterns used in openapi.yaml than Ajv's "must match pattern ...".
const patternMeaning: Record<string, string> = {
  '^(0|[1-9][0-9]{0,14})$': 'must be an integer from 0 to 999999999999999, without leading zeros',
  '^(0|[1-9][0-9]{0,2}|1000)$': 'must be an integer from 0 to 1000, without leading zeros',
  '^([1-9][0-9]{0,2}|1000)$': 'must be an integer from 1 to 1000, without leading zeros',
  '^https?://': 'must be an http:// or https:// URL',
  '^[^#]*$': 'must not have a fragment (#…)',
  '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$': 'must be a signed JWT (three base64url parts joined by dots)',
  '^(?!(custom|exchange)$)[a-z0-9_-]{1,64}$':
    'must be a provider name: 1 to 64 lower-case letters, digits, - and _ (not custom or exchange)',
  '^[0-9]{6}$': 'must be a 6-digit code',
  '^[^\\u0000\\uD800-\\uDFFF]*$': 'must not contain NUL (U+0000) or an unpaired UTF-16 surrogate',
  '^[0-9a-fA-F]{64}$': 'must be a 64-character hexadecimal token',
  // The verify body's two forms, when `otp` fits neither.
  '^[0-9]{6}$|^[0-9a-fA-F]{64}$': 'must be a 6-digit code or a 64-character hexadecimal token',
  [PROFILE_NAME_PATTERN]:
    'must not contain control characters, line separators, bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) or invisible format characters (such as U+200B, U+2060, U+FEFF)',
};

export interface AjvIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
  /** Where the rule is in the schema (`#/oneOf/1/required`). */
  schemaPath?: string;
  /** The value that failed, and the schema holding the rule (with Ajv's `verbose` option). */
  data?: unknown;
  parentSchema?: unknown;
}

/** "/input/3/name" -> "input[3].name" */
function jsonPointerToPath(pointer: string): string {
  return pointer
    .split('/')
    .slice(1)
    .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
    .join('');
}

/**
 * The issue worth reporting. Where a value fails every branch of a oneOf, Ajv lists each branch's
 * complaints, one or more per branch: the complaint of the branch the body meant is the one to report (see
 * meantBranch); when no branch can be told apart, a branch whose type matched has the real one
 * ("must have at most 2048 items"), and when none matched the types are merged ("must be string
 * or array").
 */
export function pickValidationIssue(issues: readonly AjvIssue[]): AjvIssue {
  // A field name refused by propertyNames: the name is what to report, not the rule it broke.
  const name = issues.find((i) => i.keyword === 'propertyNames');
  if (name !== undefined) return name;
  const oneOf = issues.findIndex((i) => i.keyword === 'oneOf');
  const first = issues[0] as AjvIssue;
  if (oneOf <= 0) return first;
  const byBranch = issues.slice(0, oneOf);
  const meant = meantBranch(issues[oneOf] as AjvIssue, byBranch);
  if (meant !== undefined) return meant;
  const specific = byBranch.find((i) => i.keyword !== 'type');
  if (specific) return specific;
  const types = [...new Set(byBranch.map((i) => String(i.params.type)))].join(',');
  return { ...first, params: { type: types } };
}

interface BranchSchema {
  required?: string[];
  properties?: Record<string, { const?: unknown; pattern?: string }>;
}

/**
 * The branches of a oneOf of objects are told apart by the properties that every branch pins down
 * with a `const` or a `pattern` (createSession's `method`, verifyEmail's `otp`: a code or a link
 * token). The branch whose pins the body's values fit (a pin it requires must be there) is the one
 * the body meant: its complaint is returned. When the values fit no branch, that property is the
 * complaint ("must be one of: otp, password"). Undefined when the branches cannot be told apart.
 * Reads the failing value and the schema from the issues (Ajv's `verbose` option).
 */
function meantBranch(oneOf: AjvIssue, issues: readonly AjvIssue[]): AjvIssue | undefined {
  const branches = (oneOf.parentSchema as { oneOf?: BranchSchema[] } | undefined)?.oneOf;
  const body = oneOf.data;
  if (branches === undefined || typeof body !== 'object' || body === null) return undefined;
  // A branch may report more than one issue (a wrong type, then its const): the first of each counts.
  const byBranch = branches.map((_, i) =>
    issues.find((issue) => issue.schemaPath?.startsWith(`${oneOf.schemaPath}/${i}/`)),
  );
  const values = body as Record<string, unknown>;
  const pins = Object.keys(branches[0]?.properties ?? {}).filter((p) =>
    branches.every((b) => b.properties?.[p]?.const !== undefined || b.properties?.[p]?.pattern !== undefined),
  );
  if (pins.length === 0) return undefined;
  const fits = (b: BranchSchema, p: string) => {
    const rule = b.properties?.[p] ?? {};
    if (!(p in values)) return !(b.required ?? []).includes(p);
    if (rule.const !== undefined) return values[p] === rule.const;
    return typeof values[p] === 'string' && new RegExp(rule.pattern as string).test(values[p]);
  };
  const index = branches.findIndex((b) => pins.every((p) => fits(b, p)));
  if (index >= 0) return byBranch[index] ?? undefined;
  const pin = pins.find((p) => branches.every((b) => !fits(b, p))) as string;
  const at = `${oneOf.instancePath}/${pin}`;
  if (!(pin in values)) return { ...oneOf, keyword: 'required', params: { missingProperty: pin } };
  const rules = branches.map((b) => b.properties?.[pin] ?? {});
  if (rules.every((r) => r.const !== undefined)) {
    return { ...oneOf, keyword: 'enum', instancePath: at, params: { allowedValues: rules.map((r) => r.const) } };
  }
  return { ...oneOf, keyword: 'pattern', instancePath: at, params: { pattern: rules.map((r) => r.pattern).join('|') } };
}

/**
 * One sentence that names the failing field and says what it must be. Field names come from the
 * caller, so the sentence is made printable (see printable).
 */
export function describeValidationIssue(context: string, issue: AjvIssue): string {
  return printable(sentence(context, issue));
}

function sentence(context: string, issue: AjvIssue): string {
  const where = `${context === 'querystring' ? 'query' : context}${jsonPointerToPath(issue.instancePath)}`;
  const p = issue.params;
  switch (issue.keyword) {
    case 'required':
      return `${where}.${String(p.missingProperty)} is required`;
    case 'additionalProperties':
      return context === 'querystring'
        ? `${where}.${String(p.additionalProperty)} is not a parameter of this operation`
        : `${where}.${String(p.additionalProperty)} is not an accepted field`;
    case 'enum':
      return `${where} must be one of: ${(p.allowedValues as unknown[]).map(String).join(', ')}`;
    case 'const':
      return `${where} must be ${JSON.stringify(p.allowedValue)}`;
    case 'format':
      return `${where} must be a valid ${String(p.format)}`;
    case 'pattern':
      return `${where} ${patternMeaning[String(p.pattern)] ?? issue.message ?? 'has the wrong form'}`;
    case 'type':
      // A query value is always a string, unless the parameter was repeated (an array).
      if (context === 'querystring') return `${where} must be given once`;
      return `${where} must be ${String(p.type).replaceAll(',', ' or ')}`;
    case 'minLength':
      return p.limit === 1 ? `${where} must not be empty` : `${where} must have at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `${where} must have at most ${String(p.limit)} characters`;
    case 'minimum':
      return `${where} must be at least ${String(p.limit)}`;
    case 'maximum':
      return `${where} must be at most ${String(p.limit)}`;
    case 'minItems':
      return `${where} must have at least ${String(p.limit)} item${p.limit === 1 ? '' : 's'}`;
    case 'maxItems':
      return `${where} must have at most ${String(p.limit)} items`;
    case 'maxProperties':
      return `${where} must have at most ${String(p.limit)} fields`;
    case 'minProperties':
      return `${where} must have at least ${String(p.limit)} field${p.limit === 1 ? '' : 's'}`;
    case 'propertyNames':
      return `${where}.${String(p.propertyName)} is not an accepted field name (1 to 64 letters, digits and _, starting with a letter; not an account field)`;
    default:
      return `${where} ${issue.message ?? 'is invalid'}`;
  }
}
