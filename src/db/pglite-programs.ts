import type { PGlite } from '@electric-sql/pglite';

/** PGlite's hook for the commands Postgres asks to run (popen): not part of its typed API. */
interface ExternalCommands {
  handleExternalCmd(command: string, mode: string): number;
}

/**
 * The embedded database runs no program. PGlite answers the one command it knows (`locale -a`) and
 * throws for any other, inside Postgres, which leaves its session broken for good: a `COPY … TO
 * PROGRAM` (even built at run time in a function) made every later statement of the service fail.
 * Answered with no stream instead, Postgres reports `could not execute command` as a plain error.
 */
export function refuseExternalPrograms(pglite: PGlite): void {
  const commands = pglite as unknown as ExternalCommands;
  if (typeof commands.handleExternalCmd !== 'function') {
    throw new Error('this PGlite version has no handleExternalCmd: check how it runs external commands');
  }
  const known = commands.handleExternalCmd.bind(pglite);
  commands.handleExternalCmd = (command, mode) => (command.startsWith('locale -a') ? known(command, mode) : 0);
}
