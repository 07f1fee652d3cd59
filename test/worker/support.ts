// Helpers for the Worker tests: handlers the test releases by hand, a store whose operations a
// test can intercept, an event recorder, polling with a deadline, and a registry that stops every
// worker after each test (before the store harness closes its database).
//
// Time only moves when a test advances the ManualClock. Where a test waits, it waits for
// asynchronous progress (database round trips) by polling a condition with a deadline.

import { afterEach, expect } from "vitest";
import type { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxEvent, OutboxEventType } from "../../src/outbox/events.js";
import type { Handler, HandlerResult } from "../../src/outbox/process-lease.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease, OutboxMessage } from "../../src/outbox/types.js";
import { Worker, type WorkerOptions } from "../../src/outbox/worker.js";
import { until } from "../support/wait.js";

/** How long a test waits for asynchronous progress before it gives up (real time). */
export const PROGRESS_DEADLINE_MS = 10_000;

/**
 * Polls `condition` until it returns true (or resolves to true), or fails after `timeout` ms of
 * real time with `what` in the message. Never a fixed sleep: it returns as soon as the condition holds.
 */
export async function waitUntil(what: string, condition: () => boolean | Promise<boolean>, timeout = PROGRESS_DEADLINE_MS): Promise<void> {
  await until(what, condition, { timeoutMs: timeout, intervalMs: 2 });
}

/** Whether `promise` settles within `ms` of real time (for "this must return, and promptly"). */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      deadline,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** A promise the test resolves by hand. */
export class Gate<T = void> {
  readonly promise: Promise<T>;
  #resolve!: (value: T) => void;
  #reject!: (error: unknown) => void;
  #settled = false;

  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  get settled(): boolean {
    return this.#settled;
  }

  open(value: T): void {
    this.#settled = true;
    this.#resolve(value);
  }

  fail(error: unknown): void {
    this.#settled = true;
    this.#reject(error);
  }
}

/** One call of a BlockingHandler: the handler waits until the test releases (or fails) it. */
export interface HandlerCall {
  readonly message: OutboxMessage;
  readonly lease: Lease;
  readonly signal: AbortSignal;
  /** Lets the handler return `result` (its business write, if any). */
  release(result?: HandlerResult<unknown>): void;
  /** Makes the handler throw `error`. */
  fail(error: unknown): void;
  /** True once the handler has returned or thrown. */
  readonly finished: boolean;
}

/**
 * A handler that blocks until the test releases each call. It counts how many calls run at once,
 * and the most that ever did.
 */
export class BlockingHandler {
  readonly calls: HandlerCall[] = [];
  running = 0;
  maxRunning = 0;
  readonly #gates: Gate<HandlerResult<unknown>>[] = [];

  readonly handler: Handler<unknown> = async (message, { lease, signal }) => {
    const gate = new Gate<HandlerResult<unknown>>();
    this.#gates.push(gate);
    let finished = false;
    this.calls.push({
      message,
      lease,
      signal,
      release: (result = {}) => gate.open(result),
      fail: (error) => gate.fail(error),
      get finished() {
        return finished;
      },
    });
    this.running += 1;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      return await gate.promise;
    } finally {
      this.running -= 1;
      finished = true;
    }
  };

  call(index: number): HandlerCall {
    const call = this.calls[index];
    if (call === undefined) throw new Error(`handler call ${index} has not happened (${this.calls.length} so far)`);
    return call;
  }

  async waitForCalls(count: number): Promise<void> {
    await waitUntil(`${count} handler call(s) (have ${this.calls.length})`, () => this.calls.length >= count);
  }

  /** Lets every call still waiting return (cleanup). */
  releaseAll(): void {
    for (const gate of this.#gates) if (!gate.settled) gate.open({});
  }
}

/** Every event a store emits from now on. */
export class EventLog {
  readonly events: OutboxEvent[] = [];
  readonly stop: () => void;

  constructor(store: OutboxStore<unknown>) {
    this.stop = store.events.subscribe((event) => this.events.push(event));
  }

  of<K extends OutboxEventType>(type: K, filter: (event: Extract<OutboxEvent, { type: K }>) => boolean = () => true): Extract<OutboxEvent, { type: K }>[] {
    return this.events.filter((event): event is Extract<OutboxEvent, { type: K }> => event.type === type && filter(event as Extract<OutboxEvent, { type: K }>));
  }

  count<K extends OutboxEventType>(type: K, filter?: (event: Extract<OutboxEvent, { type: K }>) => boolean): number {
    return this.of(type, filter).length;
  }

  async waitFor<K extends OutboxEventType>(
    type: K,
    count = 1,
    filter?: (event: Extract<OutboxEvent, { type: K }>) => boolean,
  ): Promise<Extract<OutboxEvent, { type: K }>[]> {
    await waitUntil(`${count} ${type} event(s) (have ${this.count(type, filter)})`, () => this.count(type, filter) >= count);
    return this.of(type, filter);
  }
}

/**
 * The same store with some operations replaced. Every other property is the store's own, with
 * methods bound to the store (its private fields need the real `this`).
 */
export function withOverrides<Tx>(store: OutboxStore<Tx>, overrides: Partial<OutboxStore<Tx>>): OutboxStore<Tx> {
  return new Proxy(store, {
    get(target, property) {
      if (Object.hasOwn(overrides, property)) return (overrides as Record<PropertyKey, unknown>)[property];
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Waits until a message's row satisfies `check`, reading it back from the store. */
export async function waitForMessage(
  store: OutboxStore<unknown>,
  messageId: string,
  what: string,
  check: (message: OutboxMessage) => boolean,
): Promise<OutboxMessage> {
  let last: OutboxMessage | undefined;
  await waitUntil(`message ${messageId} ${what}`, async () => {
    last = await store.getMessage(messageId);
    return last !== undefined && check(last);
  });
  return last!;
}

export function waitForStatus(store: OutboxStore<unknown>, messageId: string, status: OutboxMessage["status"]): Promise<OutboxMessage> {
  return waitForMessage(store, messageId, `to be ${status}`, (message) => message.status === status);
}

/** Waits until exactly `count` sleeps wait on the clock (the worker's loop, heartbeats, timers). */
export async function waitForSleepers(clock: ManualClock, count: number, also: () => boolean = () => true): Promise<void> {
  await waitUntil(`${count} sleeper(s) on the manual clock (have ${clock.sleeping})`, () => clock.sleeping === count && also());
}

/**
 * Creates workers and stops every one of them after each test, so no worker touches a database
 * the harness has closed. Call it inside the describe, AFTER useStoreHarness: after-each hooks run
 * in reverse order, so the workers stop before the database closes.
 */
export function useWorkers(clock: () => ManualClock) {
  const workers: Worker<unknown>[] = [];
  const handlers: BlockingHandler[] = [];

  afterEach(async () => {
    for (const handler of handlers.splice(0)) handler.releaseAll();
    const stopping = workers.splice(0).map((worker) => worker.stop({ graceMs: 0 }));
    const all = Promise.all(stopping);
    // A worker may be waiting on the manual clock (an error backoff): move time until it stops.
    const deadline = Date.now() + PROGRESS_DEADLINE_MS;
    while (!(await settlesWithin(all, 20))) {
      if (Date.now() > deadline) throw new Error("workers did not stop");
      clock().advance(5_000);
    }
    await all;
  });

  return {
    /** A worker registered for cleanup (not started). */
    create(options: WorkerOptions<unknown>): Worker<unknown> {
      const worker = new Worker(options);
      workers.push(worker);
      return worker;
    },
    /** A worker registered for cleanup, started. */
    async start(options: WorkerOptions<unknown>): Promise<Worker<unknown>> {
      const worker = this.create(options);
      await worker.start();
      return worker;
    },
    /** A blocking handler whose waiting calls are released after the test. */
    blocking(): BlockingHandler {
      const handler = new BlockingHandler();
      handlers.push(handler);
      return handler;
    },
  };
}

/** Fails the test if `value` is undefined; returns it typed. */
export function defined<T>(value: T | undefined, what: string): T {
  expect(value, what).toBeDefined();
  return value as T;
}
