// A lab instance that dies before its crash point is reported with the error it died of, not
// with the last line Node prints after an uncaught error (its own version).

import { describe, expect, it } from "vitest";
import { lastError } from "../../src/lab/killed-instance.js";

describe("a lab instance's stderr, read after it died", () => {
  it("names an uncaught error and where it was thrown, not Node's version line", () => {
    const stderr = [
      "file:///app/dist/lab/instance-process.js:40",
      '        throw new Error("connection terminated");',
      "        ^",
      "",
      "Error: connection terminated",
      "    at Client.onEnd (file:///app/node_modules/pg/lib/client.js:1:1)",
      "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)",
      "",
      "Node.js v24.21.0",
      "",
    ].join("\n");
    expect(lastError(stderr)).toBe("Error: connection terminated (at Client.onEnd (file:///app/node_modules/pg/lib/client.js:1:1))");
  });

  it("gives the last line of anything else, and says when there was nothing", () => {
    expect(lastError("starting\ncould not open the database\n")).toBe("could not open the database");
    expect(lastError("")).toBe("no message");
    expect(lastError("\nNode.js v20.19.0\n")).toBe("no message");
  });
});
