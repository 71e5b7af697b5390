// What a PostgreSQL client may not send to the embedded database: COPY from the client (`COPY …
// FROM STDIN`, psql's `\copy … from`). PGlite runs one message at a time, so the data that should
// follow never reaches it: it ends the copy at "end of file", loses the protocol's thread, and the
// service's process is stuck. A message is refused when its text has both words anywhere, whatever
// quotes or comments hold them: the server decides what is a string (`standard_conforming_strings`
// changes it), so a check that parsed literals could be told a COPY is a string. PL/pgSQL and SQL
// functions refuse COPY from the client themselves. (COPY with a program is stopped where PGlite
// would run it: pglite-programs.ts.)

const COPY = /\bcopy\b/i;
const STDIN = /\bstdin\b/i;

/** Why a statement's text is refused, or undefined when it may run. */
export function refusedStatement(text: string): string | undefined {
  if (COPY.test(text) && STDIN.test(text))
    return 'COPY FROM STDIN (psql: \\copy … from) is not available on the embedded database: use INSERT instead (a statement naming both COPY and STDIN is refused)';
  return undefined;
}
