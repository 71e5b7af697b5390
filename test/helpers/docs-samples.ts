/**
 * The machinery of test/docs-samples.test.ts: finds the fenced code blocks of README.md and docs/*.md,
 * turns each into a script that runs against a started service, and checks the answers the docs show.
 * The conventions a sample follows are described in test/docs-samples.test.ts and docs/development.md.
 *
 * Run as a program (`node test/helpers/docs-samples.ts json <path>` or `mail code|token`), it is the
 * helper that the rewritten shell samples call to fill in values.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** One fenced code block of a markdown file. */
export interface Block {
  /** The markdown file, relative to the repository. */
  file: string;
  /** The line of the opening fence (1-based). */
  line: number;
  lang: string;
  /** The lines between the fences. */
  lines: string[];
  /** Set by `<!-- sample: not run (reason) -->` on the line before the fence. */
  notRun?: string;
  /** Set by `<!-- sample: service -->`: the block starts the service (its variables are the runner's). */
  service?: boolean;
}

const RUNNABLE = new Set(['sh', 'bash', 'shell', 'ts', 'typescript', 'sql']);
/** Fences that show a shape rather than code to run (a directory layout, a URL pattern). */
export const ILLUSTRATIONS = new Set(['text']);

export const isShell = (b: Block) => b.lang === 'sh' || b.lang === 'bash' || b.lang === 'shell';
export const isTypeScript = (b: Block) => b.lang === 'ts' || b.lang === 'typescript';
/** SQL blocks run with psql on the service's database (the embedded one over PGLITE_SOCKET_PORT). */
export const isSql = (b: Block) => b.lang === 'sql';
export const isRunnable = (b: Block) => RUNNABLE.has(b.lang) && b.notRun === undefined && !b.service;

export function extractBlocks(file: string, text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S*)\s*$/.exec(lines[i] ?? '');
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i] ?? ''); i++) body.push(lines[i] ?? '');
    let prev = start - 1;
    while (prev >= 0 && (lines[prev] ?? '').trim() === '') prev--;
    const marker = /^<!--\s*sample:\s*(.*?)\s*-->$/.exec((lines[prev] ?? '').trim());
    const block: Block = { file, line: start + 1, lang: open[2] ?? '', lines: body };
    if (marker) {
      const what = marker[1] ?? '';
      if (what === 'service') block.service = true;
      else {
        const notRun = /^not run \((.+)\)$/.exec(what);
        if (!notRun) throw new Error(`${file}:${prev + 1}: unknown sample marker "${what}"`);
        block.notRun = notRun[1] ?? what;
      }
    }
    blocks.push(block);
  }
  return blocks;
}

/** The `NAME=value` settings of the service block's `npm start` line. */
export function serviceEnv(block: Block): Record<string, string> {
  const env: Record<string, string> = {};
  const text = block.lines.join(' ').replace(/\\\s+/g, ' ');
  const start = /((?:\s*[A-Z_][A-Z0-9_]*=(?:'[^']*'|"[^"]*"|\S+))+)\s+npm start/.exec(text);
  if (!start) throw new Error(`${block.file}:${block.line}: the service block has no "VAR=value … npm start"`);
  for (const m of (start[1] ?? '').matchAll(/([A-Z_][A-Z0-9_]*)=('[^']*'|"[^"]*"|\S+)/g)) {
    const value = m[2] ?? '';
    env[m[1] ?? ''] = /^['"]/.test(value) ? value.slice(1, -1) : value;
  }
  return env;
}

/** An answer a sample shows, to be compared with what the service said. */
export interface Check {
  /** The markdown line of the shown answer. */
  line: number;
  /** The status shown, when one is. */
  status?: number;
  /** The answer shown: one entry per line (`HTTP/…` answers), or a single entry. */
  expected: string[];
  /** The answer shows the status line and headers (`curl -i`). */
  withHeaders: boolean;
  /** `# the service logs: …`: a line of the service's log written after the command, not its answer. */
  log?: boolean;
  /** The log mark (`$__D/logmark.<n>`) taken before the command. */
  mark: number;
}

const ANSWER = /^\s*#\s?(\{|\[|HTTP\/|\d{3}(\s|$))/;
const LOGGED = /^\s*#\s*the service logs: (.+)$/;
const CONTINUATION = /^\s*#\s{2,}\S/;

/** Replaces the documentation's address of the service with the one under test. */
export const withPort = (s: string, port: number) =>
  s.replace(/\b(localhost|127\.0\.0\.1):7130\b/g, (_m, host: string) => `${host}:${port}`);

/**
 * A shell block as a bash script: each command followed by a shown answer has its output captured in
 * `$__D/out.<n>` and the status of its last HTTP exchange in `$__D/status.<n>`; fill-in lines become
 * calls of the helper.
 */
export function shellScript(block: Block, port: number): { script: string; checks: Check[] } {
  const lines = block.lines.map((l) => withPort(l, port));
  const out: string[] = [];
  const checks: Check[] = [];
  let i = 0;
  const pending: string[] = [];
  const flush = () => {
    out.push(...pending);
    pending.length = 0;
  };
  while (i < lines.length) {
    const line = lines[i] ?? '';
    if (ANSWER.test(line) && pending.length > 0) {
      // The command this answer belongs to: the last logical line before it (with its continuations).
      let start = pending.length - 1;
      while (start > 0 && /\\\s*$/.test(pending[start - 1] ?? '')) start--;
      const command = pending.splice(start);
      flush();
      const shown: string[] = [line.replace(/^\s*#\s?/, '')];
      const mdLine = block.line + 1 + i;
      i++;
      while (i < lines.length && CONTINUATION.test(lines[i] ?? '')) {
        const more = (lines[i] ?? '').replace(/^\s*#\s*/, '');
        shown[shown.length - 1] += more;
        i++;
      }
      let status: number | undefined;
      const first = shown[0] ?? '';
      const withHeaders = first.startsWith('HTTP/');
      if (!withHeaders) {
        const m = /^(\d{3})(?:\s+(.*))?$/.exec(first);
        if (m) {
          status = Number(m[1]);
          shown[0] = m[2] ?? '';
        }
      } else {
        // Further header/body lines of a `curl -i` answer are shown one per comment line.
        while (i < lines.length && /^\s*#\s?\S/.test(lines[i] ?? '') && !ANSWER.test(lines[i] ?? '')) {
          shown.push((lines[i] ?? '').replace(/^\s*#\s?/, ''));
          i++;
          while (i < lines.length && CONTINUATION.test(lines[i] ?? '')) {
            shown[shown.length - 1] += (lines[i] ?? '').replace(/^\s*#\s*/, '');
            i++;
          }
        }
        // A body line of a `curl -i` answer.
        while (i < lines.length && ANSWER.test(lines[i] ?? '') && /^\s*#\s?[{[]/.test(lines[i] ?? '')) {
          shown.push((lines[i] ?? '').replace(/^\s*#\s?/, ''));
          i++;
          while (i < lines.length && CONTINUATION.test(lines[i] ?? '')) {
            shown[shown.length - 1] += (lines[i] ?? '').replace(/^\s*#\s*/, '');
            i++;
          }
        }
      }
      const n = checks.length;
      checks.push({ line: mdLine, ...(status === undefined ? {} : { status }), expected: shown, withHeaders, mark: n });
      out.push(`__docs_logmark ${n}; : >"$__D/h"; {`, ...command, `} >"$__D/out.${n}" 2>&1; __docs_status ${n}`);
      continue;
    }
    const logged = LOGGED.exec(line);
    if (logged) {
      // After a shown answer: the log since that command; else the command right before.
      const n = checks.length;
      const previous = checks[n - 1];
      if (pending.length === 0 && previous !== undefined) {
        checks.push({
          line: block.line + 1 + i,
          expected: [logged[1] ?? ''],
          withHeaders: false,
          log: true,
          mark: previous.mark,
        });
      } else {
        let start = pending.length - 1;
        while (start > 0 && /\\\s*$/.test(pending[start - 1] ?? '')) start--;
        const command = pending.splice(start);
        flush();
        checks.push({ line: block.line + 1 + i, expected: [logged[1] ?? ''], withHeaders: false, log: true, mark: n });
        out.push(`__docs_logmark ${n}`, ...command);
      }
      i++;
      continue;
    }
    pending.push(fillIn(line));
    i++;
  }
  flush();
  return { script: out.join('\n'), checks };
}

/** `NAME=value   # the code from /dev/inbox`, `# the link token from /dev/inbox`, `# <path> from the answer above`. */
function fillIn(line: string): string {
  const m = /^(\s*)(export\s+)?([A-Za-z_]\w*)=(\S+)(\s+#\s*(.*))$/.exec(line);
  if (!m) return line;
  const [, indent = '', exp = '', name = '', , comment = '', note = ''] = m;
  let value: string | undefined;
  if (/\bcode from \/dev\/inbox\b/.test(note)) value = `"$(__docs_mail code)"`;
  else if (/\blink token from \/dev\/inbox\b/.test(note)) value = `"$(__docs_mail token)"`;
  else if (/^the ([\w-]+) header from the answer above\b/.test(note))
    value = `"$(__docs_header '${/^the ([\w-]+) header/.exec(note)?.[1]}')"`;
  else {
    const path = /^`?([\w.[\]]+)`? from the answer above\b/.exec(note);
    if (path) value = `"$(__docs_json '${path[1]}')"`;
  }
  return value === undefined ? line : `${indent}${exp}${name}=${value}${comment}`;
}

/** TypeScript: `'…' // the code from /dev/inbox` (or `link token`) is read from the development inbox at run time. */
export function typeScriptModule(block: Block, port: number, helper: string, sdk: string): string {
  const body = block.lines.map((raw) => {
    let l = withPort(raw, port).replace(/from 'accounts-embeddings-realtime-client'/, `from '${sdk}'`);
    const kind = /\/\/.*\bcode from \/dev\/inbox\b/.test(l)
      ? 'code'
      : /\/\/.*\blink token from \/dev\/inbox\b/.test(l)
        ? 'token'
        : undefined;
    // The placeholder: a quoted 6-digit code (or 64-hex token, or `…`), else the line's first string.
    const placeholder = /'(\d{6}|[0-9a-f…]+)'/.test(l) ? /'(\d{6}|[0-9a-f…]+)'/ : /'[^']*'/;
    if (kind) l = l.replace(placeholder, `(await __docsMail('${kind}'))`);
    return l;
  });
  return [`import { docsMail as __docsMail } from '${helper}';`, ...body, ''].join('\n');
}

/** A shown answer as a regular expression: `…` (or `...`) matches anything. */
export function pattern(shown: string): RegExp {
  const parts = shown.trim().split(/…|\.\.\./);
  return new RegExp(`^${parts.map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[\\s\\S]*?')}$`);
}

/** Compares one shown answer with the output and status of its command; returns why they differ, or undefined. */
export function compare(check: Check, output: string, status: number | undefined): string | undefined {
  if (!check.withHeaders) {
    if (check.status !== undefined && status !== check.status) return `status ${status}, the docs show ${check.status}`;
    if (check.status === undefined && (status === undefined || status < 200 || status > 299))
      return `status ${status}, the docs show a success`;
    const shown = check.expected[0] ?? '';
    const actual = output.trim();
    if (shown === '' ? actual !== '' : !pattern(shown).test(actual))
      return `the answer differs\n  docs:   ${shown}\n  actual: ${actual}`;
    return undefined;
  }
  // `curl -i`: every line shown must be found, in order (headers case-insensitively).
  const actualLines = output.split(/\r?\n/).map((l) => l.trimEnd());
  let at = 0;
  for (const shown of check.expected) {
    const re = pattern(shown);
    const ci = new RegExp(re.source, 'i');
    const isHeader = /^[\w-]+:/.test(shown);
    let found = -1;
    for (let k = at; k < actualLines.length; k++) {
      if ((isHeader ? ci : re).test(actualLines[k] ?? '')) {
        found = k;
        break;
      }
    }
    if (found < 0) return `"${shown}" is not in the answer:\n${output}`;
    at = found + 1;
  }
  return undefined;
}

/**
 * Whether a line of the service's log (JSON lines) after line `from` has a message matching `shown`
 * (`…` matches anything); waits up to `waitMs` for it, since mail is handled after the answer.
 */
export async function loggedAfter(
  logFile: string,
  from: number,
  shown: string,
  waitMs = 3000,
): Promise<string | undefined> {
  const re = pattern(shown);
  const deadline = Date.now() + waitMs;
  for (;;) {
    const lines = readFileSync(logFile, 'utf8').split('\n').slice(from);
    const messages = lines.map((l) => {
      try {
        return String((JSON.parse(l) as { msg?: unknown }).msg ?? '');
      } catch {
        return l;
      }
    });
    if (messages.some((m) => re.test(m))) return undefined;
    if (Date.now() > deadline) return `no line of the service's log says "${shown}"; it wrote:\n${messages.join('\n')}`;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The emails the service's log announces (JSON lines): each one's line and development-inbox id. */
function mails(log: string): { line: number; id: number }[] {
  const found: { line: number; id: number }[] = [];
  for (const [line, entry] of log.split('\n').entries()) {
    if (!entry.includes('"mail"')) continue;
    try {
      const parsed = JSON.parse(entry) as { mail?: { id?: number } };
      if (typeof parsed.mail?.id === 'number') found.push({ line, id: parsed.mail.id });
    } catch {
      // not a JSON line
    }
  }
  return found;
}

/** An email of the development inbox (GET /dev/inbox.json), by its id. */
// Unwrapped: in a TypeScript sample, fetch is wrapped below to mark the log before each request.
const plainFetch = globalThis.fetch.bind(globalThis);

async function inboxMessage(id: number): Promise<{ code: string | null; link: string | null; text: string }> {
  const res = await plainFetch(process.env.DOCS_INBOX ?? '');
  const { messages } = (await res.json()) as {
    messages: Array<{ id: number; code: string | null; link: string | null; text: string }>;
  };
  const found = messages.find((m) => m.id === id);
  if (found === undefined) throw new Error(`email #${id} is not in the development inbox`);
  return found;
}

const lineCount = (file: string) => readFileSync(file, 'utf8').split('\n').length - 1;
const readNumber = (file: string | undefined) => {
  try {
    return Number(readFileSync(file ?? '', 'utf8')) || 0;
  } catch {
    return 0;
  }
};

/**
 * The code (or link token) of the newest email the service logged after the last request of the
 * sample (DOCS_REQUEST_MARK: the log's length before it) and after the last email read
 * (DOCS_MAIL_READ), waiting for it: the service sends mail after it has answered.
 */
export async function docsMail(kind: 'code' | 'token'): Promise<string> {
  const logFile = process.env.DOCS_SERVICE_LOG ?? '';
  const since = Math.max(readNumber(process.env.DOCS_MAIL_READ), readNumber(process.env.DOCS_REQUEST_MARK));
  const deadline = Date.now() + 10_000;
  let seen = -1;
  for (;;) {
    const fresh = mails(readFileSync(logFile, 'utf8')).filter((m) => m.line >= since);
    // At least one, and no other arriving for a moment.
    const newest = fresh[fresh.length - 1];
    if (newest !== undefined && fresh.length === seen) {
      const mail = await inboxMessage(newest.id);
      const value = kind === 'code' ? (mail.code ?? undefined) : /[?&]token=([0-9a-f]{64})/.exec(mail.link ?? '')?.[1];
      if (value === undefined) throw new Error(`the newest email holds no ${kind}:\n${mail.text}`);
      writeFileSync(process.env.DOCS_MAIL_READ ?? '', String(newest.line + 1));
      return value;
    }
    if (Date.now() > deadline) throw new Error(`no email in the service's log after line ${since}`);
    seen = fresh.length;
    await new Promise((r) => setTimeout(r, 200));
  }
}

// In a TypeScript sample (which imports this module first): every fetch marks the log's length, so
// that the code read next is from an email sent after the request.
if (process.env.DOCS_REQUEST_MARK && process.argv[1] !== fileURLToPath(import.meta.url)) {
  const { fetch: original } = globalThis;
  const mark = process.env.DOCS_REQUEST_MARK;
  const log = process.env.DOCS_SERVICE_LOG ?? '';
  globalThis.fetch = (...args: Parameters<typeof fetch>) => {
    writeFileSync(mark, String(lineCount(log)));
    return original(...args);
  };
}

/** A value of the JSON answer (a body, or a `curl -i` answer) read from stdin, by a dotted path. */
function jsonValue(text: string, path: string): string {
  const body = text.startsWith('HTTP/') ? text.slice(text.search(/\r?\n\r?\n/)).trim() : text;
  let value: unknown = JSON.parse(body);
  for (const key of path
    .replace(/\[(\d+)\]/g, '.$1')
    .split('.')
    .filter(Boolean)) {
    value = (value as Record<string, unknown> | undefined)?.[key];
  }
  if (value === undefined || value === null) throw new Error(`no ${path} in the answer: ${body}`);
  return typeof value === 'string' ? value : JSON.stringify(value);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [what, arg = ''] = process.argv.slice(2);
  if (what === 'json') process.stdout.write(jsonValue(readFileSync(0, 'utf8'), arg));
  else if (what === 'mail') process.stdout.write(await docsMail(arg as 'code' | 'token'));
  else throw new Error(`unknown command ${what}`);
}
