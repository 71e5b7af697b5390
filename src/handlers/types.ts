import type { FastifyReply, FastifyRequest } from 'fastify';
import type { operations } from '../../generated/openapi.ts';

type Operation<K extends keyof operations> = operations[K];
type Json<T> = T extends { content: { 'application/json': infer B } } ? B : never;
/** The body of a text response (getMetrics: the Prometheus exposition), whatever its text/* media type. */
type Text<T> = T extends { content: infer C }
  ? { [M in keyof C]: M extends `text/${string}` ? C[M] : never }[keyof C]
  : never;

/** The JSON request body of an operation (undefined when it has none or it is optional and absent). */
export type RequestBody<K extends keyof operations> =
  Operation<K> extends { requestBody: infer RB }
    ? Json<RB>
    : Operation<K> extends { requestBody?: infer RB }
      ? Json<NonNullable<RB>> | undefined
      : undefined;

type Parameters<
  K extends keyof operations,
  In extends 'query' | 'header' | 'path',
> = Operation<K>['parameters'] extends {
  [P in In]?: infer Q;
}
  ? NonNullable<Q>
  : Record<string, never>;

/** The body of each 2xx JSON (or text) response an operation declares. */
export type SuccessBody<K extends keyof operations> = {
  [S in keyof Operation<K>['responses']]: S extends 200 | 201 | 202
    ? Json<Operation<K>['responses'][S]> | Text<Operation<K>['responses'][S]>
    : never;
}[keyof Operation<K>['responses']];

export type OperationRequest<K extends keyof operations> = FastifyRequest<{
  Body: RequestBody<K>;
  Params: Parameters<K, 'path'>;
  Querystring: Parameters<K, 'query'>;
  Headers: Parameters<K, 'header'>;
}>;

/**
 * A handler for one operationId: it returns the success body (the status is set on `reply` when it
 * is not 200), returns undefined after `reply.code(204)`, or throws an ApiError.
 */
export type OperationHandler<K extends keyof operations> = (
  request: OperationRequest<K>,
  reply: FastifyReply,
) => Promise<SuccessBody<K> | undefined>;

/** One handler per operationId in openapi.yaml: a missing, extra or mistyped one fails the type check. */
export type ServiceHandlers = { [K in keyof operations]: OperationHandler<K> };

export type HandlersFor<K extends keyof operations> = Pick<ServiceHandlers, K>;
