// The typed message map at run time: what it builds is what the untyped API takes (the compiler's
// side is in message-types.typecheck.ts), and a consumer's dispatch by type refuses a stranger.

import { describe, expect, it } from "vitest";
import { InvalidArgumentError, UnknownMessageTypeError } from "../../src/outbox/errors.js";
import { messageTypes } from "../../src/outbox/message-types.js";

const messages = messageTypes<{ "order.placed": { orderId: string }; "order.paid": { orderId: string; cents: number } }>(["order.placed", "order.paid"]);

describe("messageTypes", () => {
  it("builds the NewMessage enqueue takes, options included", () => {
    expect(messages.message("order.placed", { orderId: "o-1" }, { key: "o-1", dedupeKey: "placed-o-1" })).toEqual({
      type: "order.placed",
      payload: { orderId: "o-1" },
      key: "o-1",
      dedupeKey: "placed-o-1",
    });
    expect(messages.types).toEqual(["order.placed", "order.paid"]);
    expect(messageTypes<{ a: number }>().types).toBeUndefined();
  });

  it("hands back the handlers as a plain map, refusing one that is not a function", () => {
    const placed = async () => undefined;
    expect(messages.handlers({ "order.placed": placed })).toEqual({ "order.placed": placed });
    expect(() => messages.handlers({ "order.placed": 42 as never })).toThrow(InvalidArgumentError);
    expect(() => messages.handlers({ "order.placed": 42 as never })).toThrow(
      'messages.handlers: the handler for "order.placed" is not a function (got number)',
    );
  });

  it("dispatches a delivered message to its type's handler, and refuses a type it has none for unless told otherwise", async () => {
    const seen: string[] = [];
    const handle = messages.delivery<{ type: string | null; body: unknown }, string>({
      "order.paid": (message, tx) => {
        seen.push(`${tx}:${message.body.orderId}:${message.body.cents}`);
      },
    });
    await handle({ type: "order.paid", body: { orderId: "o-1", cents: 5 } }, "tx1");
    expect(seen).toEqual(["tx1:o-1:5"]);
    expect(() => handle({ type: "order.placed", body: {} }, "tx2")).toThrow(UnknownMessageTypeError);
    expect(() => handle({ type: null, body: {} }, "tx2")).toThrow(/no handler for message type "\(none\)" \(this worker handles: order\.paid\)/);
    const lenient = messages.delivery<{ type: string | null; body: unknown }, string>({}, { otherwise: (message) => void seen.push(`other:${message.type}`) });
    await lenient({ type: "order.placed", body: {} }, "tx3");
    expect(seen).toEqual(["tx1:o-1:5", "other:order.placed"]);
  });

  it("narrows a claimed message by type", () => {
    const message = { type: "order.paid", payload: { orderId: "o-1", cents: 7 } } as never;
    expect(messages.is(message, "order.paid")).toBe(true);
    expect(messages.is(message, "order.placed")).toBe(false);
  });

  it("refuses a type list that is not one", () => {
    expect(() => messageTypes<{ a: number }>("a" as never)).toThrow(InvalidArgumentError);
  });
});
