// tap `after`: the status codes the suite exercised for each operation of openapi.yaml. With
// CONTRACT_COVERAGE=required (npm test, .ci/run: the whole suite) it fails when an operation has no
// test of its success response or of any error response; a run of a few files only reports.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { specDocument } from '../../src/spec.ts';
import { coverageDir } from '../helpers/contract-check.ts';

const seen = new Map<string, Set<number>>();
if (existsSync(coverageDir)) {
  for (const file of readdirSync(coverageDir)) {
    const data = JSON.parse(readFileSync(path.join(coverageDir, file), 'utf8')) as Record<string, number[]>;
    for (const [id, statuses] of Object.entries(data)) {
      const set = seen.get(id) ?? new Set<number>();
      for (const s of statuses) set.add(s);
      seen.set(id, set);
    }
  }
}

type Operation = { operationId: string; responses: Record<string, unknown> };
const paths = specDocument.paths as Record<string, Record<string, Operation>>;
const rows: string[] = [];
const gaps: string[] = [];
for (const methods of Object.values(paths)) {
  for (const op of Object.values(methods)) {
    const statuses = [...(seen.get(op.operationId) ?? [])].sort((a, b) => a - b);
    const declared = Object.keys(op.responses).map(Number);
    const untested = declared.filter((s) => !statuses.includes(s));
    rows.push(`| ${op.operationId} | ${statuses.join(', ') || '-'} | ${untested.join(', ') || '-'} |`);
    // A success is a 2xx, or the 3xx of an operation that answers only with a redirect (the OAuth callback).
    const success = declared.some((s) => s >= 200 && s < 300)
      ? (s: number) => s >= 200 && s < 300
      : (s: number) => s < 400;
    if (!statuses.some(success)) gaps.push(`${op.operationId}: no test of a success response`);
    if (!statuses.some((s) => s >= 400)) gaps.push(`${op.operationId}: no test of an error response`);
  }
}
console.log('\nResponses exercised by the suite, checked against openapi.yaml\n');
console.log('| operation | statuses exercised | declared, not exercised |\n|---|---|---|');
console.log(rows.join('\n'));
if (gaps.length > 0) {
  console.error(`\ncontract coverage gaps:\n${gaps.map((g) => `  ${g}`).join('\n')}`);
  if (process.env.CONTRACT_COVERAGE === 'required') process.exit(1);
}
