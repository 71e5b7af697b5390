import type {
  KyselyPlugin,
  PluginTransformQueryArgs,
  PluginTransformResultArgs,
  QueryResult,
  RootOperationNode,
  UnknownRow,
} from 'kysely';

/** Records the SQL text of every statement, and the rows they wrote, while `recording` is set. */
export class StatementRecorder implements KyselyPlugin {
  recording: string[] | undefined;
  rowsWritten = 0;
  #compile: ((node: RootOperationNode) => string) | undefined;
  setCompiler(compile: (node: RootOperationNode) => string) {
    this.#compile = compile;
  }
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (this.recording && this.#compile) this.recording.push(this.#compile(args.node));
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (this.recording) this.rowsWritten += Number(args.result.numAffectedRows ?? 0);
    return args.result;
  }
}
