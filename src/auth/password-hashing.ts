import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyInstance } from 'fastify';
import { type AddressNetworks, addressNetworks } from '../client-address.ts';
import type { Config } from '../config.ts';
import { ApiError } from '../errors.ts';

/** Why a hash was refused: every place was taken, or the requester's network held its share. */
export type HashRefusal = 'queue_full' | 'network_share';

export interface HashQueueOptions {
  /** Hashes run at once (each takes a libuv thread and 32 MiB). */
  concurrency: number;
  /** Hashes that may wait for a turn, all networks together. */
  maxWaiting: number;
  /** Hashes one network group (an IPv6 /48, an IPv4 /24) may have waiting. */
  maxWaitingPerNetwork: number;
  onRefused?: (reason: HashRefusal) => void;
}

export interface HashQueueStats {
  running: number;
  waiting: number;
}

interface Job {
  network: string;
  /** Arrival order, to find a group's newest waiting job. */
  seq: number;
  start: () => void;
  /** Answers the job's request 503 (it lost its place to another network's newcomer). */
  evict: () => void;
}

/** The jobs of one network group, its networks served in turn. */
interface Group {
  byNetwork: Map<string, Job[]>;
  waiting: number;
}

/** How many groups' last turn is remembered (a flood's groups among them). */
const REMEMBERED_GROUPS = 10_000;

/**
 * A bounded queue of password hashes with fixed concurrency, fair between networks. A job that
 * finds no place is refused at once (503 with Retry-After) rather than left to wait. Admission is
 * fair too: when every place is taken, a newcomer whose network group has at least two fewer jobs
 * waiting than the group with the most takes the place of that group's newest waiting job, which
 * is answered 503 with Retry-After at once; otherwise the newcomer is refused. So a few networks
 * that fill the queue lose places to everyone else instead of shutting them out. Among the
 * network groups with jobs waiting, the one whose last turn is longest ago goes next (a group
 * never served first), so a flood from one network waits behind everybody else's next job instead
 * of in front of it; within a group, its networks (/56s) take turns.
 */
export class HashQueue {
  readonly #options: HashQueueOptions;
  readonly #groups = new Map<string, Group>();
  /** The sequence number of each group's last turn, oldest first. */
  readonly #lastTurn = new Map<string, number>();
  #turns = 0;
  #arrivals = 0;
  #running = 0;
  #waiting = 0;
  /** A moving average of how long one hash takes, for Retry-After. */
  #averageMs = 100;

  constructor(options: HashQueueOptions) {
    this.#options = options;
  }

  stats(): HashQueueStats {
    return { running: this.#running, waiting: this.#waiting };
  }

  /** Runs `task` in its turn, or throws 503 SERVICE_UNAVAILABLE (with Retry-After) when there is no place. */
  run<T>(from: AddressNetworks, task: () => Promise<T>): Promise<T> {
    if (this.#running < this.#options.concurrency && this.#waiting === 0) {
      this.#takeTurn(from.group);
      return this.#execute(task);
    }
    const group = this.#groups.get(from.group);
    if ((group?.waiting ?? 0) >= this.#options.maxWaitingPerNetwork) throw this.#refuse('network_share');
    if (this.#waiting >= this.#options.maxWaiting && !this.#evictFor(group?.waiting ?? 0)) {
      throw this.#refuse('queue_full');
    }
    return new Promise<T>((resolve, reject) => {
      const job: Job = {
        network: from.network,
        seq: this.#arrivals++,
        start: () => this.#execute(task).then(resolve, reject),
        evict: () => reject(this.#refuse('queue_full')),
      };
      const g = this.#groups.get(from.group) ?? { byNetwork: new Map<string, Job[]>(), waiting: 0 };
      if (!this.#groups.has(from.group)) this.#groups.set(from.group, g);
      const jobs = g.byNetwork.get(from.network);
      if (jobs === undefined) g.byNetwork.set(from.network, [job]);
      else jobs.push(job);
      g.waiting++;
      this.#waiting++;
    });
  }

  async #execute<T>(task: () => Promise<T>): Promise<T> {
    this.#running++;
    const started = performance.now();
    try {
      return await task();
    } finally {
      this.#averageMs = 0.8 * this.#averageMs + 0.2 * (performance.now() - started);
      this.#running--;
      this.#next();
    }
  }

  #next(): void {
    while (this.#running < this.#options.concurrency && this.#waiting > 0) {
      // The group whose last turn is longest ago (never: first); Map order breaks ties by arrival.
      let chosen: string | undefined;
      let chosenTurn = Number.POSITIVE_INFINITY;
      for (const key of this.#groups.keys()) {
        const turn = this.#lastTurn.get(key) ?? -1;
        if (turn < chosenTurn) {
          chosen = key;
          chosenTurn = turn;
        }
      }
      if (chosen === undefined) return;
      const group = this.#groups.get(chosen) as Group;
      this.#takeTurn(chosen);
      // Its networks in turn: the first one's job, and that network goes to the back.
      const [network, jobs] = group.byNetwork.entries().next().value as [string, Job[]];
      const job = jobs.shift() as Job;
      group.byNetwork.delete(network);
      if (jobs.length > 0) group.byNetwork.set(network, jobs);
      group.waiting--;
      this.#waiting--;
      if (group.waiting === 0) this.#groups.delete(chosen);
      job.start();
    }
  }

  /**
   * Makes a place for a newcomer whose group has `waiting` jobs waiting, when the queue is full: if
   * the group with the most jobs waiting (of several, the latest to start waiting) has at least two
   * more, its newest waiting job is taken out and answered 503 (a swap between groups one apart
   * would only change who is refused). Returns whether a place was made.
   */
  #evictFor(waiting: number): boolean {
    let largest: [string, Group] | undefined;
    for (const entry of this.#groups) if (entry[1].waiting >= (largest?.[1].waiting ?? 0)) largest = entry;
    if (largest === undefined || largest[1].waiting < waiting + 2) return false;
    const [key, group] = largest;
    let newest: [string, Job[]] | undefined;
    for (const entry of group.byNetwork) {
      if ((entry[1].at(-1)?.seq ?? -1) > (newest?.[1].at(-1)?.seq ?? -1)) newest = entry;
    }
    if (newest === undefined) return false;
    const [network, jobs] = newest;
    const job = jobs.pop() as Job;
    if (jobs.length === 0) group.byNetwork.delete(network);
    group.waiting--;
    this.#waiting--;
    if (group.waiting === 0) this.#groups.delete(key);
    job.evict();
    return true;
  }

  /** Records that `group` is served now (its remembered turn moves to the newest). */
  #takeTurn(group: string): void {
    this.#lastTurn.delete(group);
    this.#lastTurn.set(group, this.#turns++);
    if (this.#lastTurn.size > REMEMBERED_GROUPS) this.#lastTurn.delete(this.#lastTurn.keys().next().value as string);
  }

  #refuse(reason: HashRefusal): ApiError {
    this.#options.onRefused?.(reason);
    // About when the hashes now waiting will have run.
    const seconds = Math.max(
      1,
      Math.ceil(((this.#waiting + this.#running) * this.#averageMs) / this.#options.concurrency / 1000),
    );
    return new ApiError('SERVICE_UNAVAILABLE', `Too many password checks in progress; try again in ${seconds} s`, {
      'retry-after': String(seconds),
    });
  }
}

interface HashingContext {
  queue: HashQueue;
  from: AddressNetworks;
}

const requestContext = new AsyncLocalStorage<HashingContext>();

/**
 * Runs one password hash: through the queue of the request it serves (found from the async
 * context, so that callers need not pass it), or at once outside any request (start-up).
 */
export function queuedHash<T>(task: () => Promise<T>): Promise<T> {
  const context = requestContext.getStore();
  if (context === undefined) return task();
  try {
    return context.queue.run(context.from, task);
  } catch (err) {
    return Promise.reject(err);
  }
}

/**
 * Gives every request of `app` the instance's hash queue and its client's networks (IPv6 by
 * RATE_LIMIT_IPV6_PREFIX), so that the hashes it asks for (crypto.ts) wait their turn there.
 */
export function registerPasswordHashing(
  app: FastifyInstance,
  config: Readonly<Config>,
  onRefused?: (reason: HashRefusal) => void,
): HashQueue {
  const queue = new HashQueue({ ...config.passwordHashing, ...(onRefused ? { onRefused } : {}) });
  // After the body is read, so that the handler (and every hook after this one) runs in the context.
  app.addHook('preHandler', (request, _reply, done) => {
    requestContext.run({ queue, from: addressNetworks(request.ip, config.rateLimits.ipv6Prefix) }, done);
  });
  return queue;
}
