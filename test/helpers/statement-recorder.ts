import type {
  KyselyPlugin,
  PluginTransformQueryArgs,
  PluginTransformResultArgs,
  QueryResult,
  RootOperationNode,
  UnknownRow,
} from 'kysely';

/**
 * The app's own background reads, which may run while a request is recorded: the realtime policy
 * poll (src/realtime/policy-cache.ts, every second on PGlite). They are not the request's work.
 */
const BACKGROUND = /\bfrom pg_policies\b/;

/** Records the SQL text of every statement, and the rows they wrote, while `recording` is set. */
export class StatementRecorder implements KyselyPlugin {
  recording: string[] | undefined;
  rowsWritten = 0;
  #compile: ((node: RootOperationNode) => string) | undefined;
  setCompiler(compile: (node: RootOperationNode) => string) {
    this.#compile = compile;
  }
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (this.recording && this.#compile) {
      const statement = this.#compile(args.node);
      if (!BACKGROUND.test(statement)) this.recording.push(statement);
    }
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (this.recording) this.rowsWritten += Number(args.result.numAffectedRows ?? 0);
    return args.result;
  }
}
