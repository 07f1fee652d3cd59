// The child process of the Session 13 and 14 scenarios: one application instance that the lab
// kills. The lab forks it (killed-instance.ts) and sends it a plan and a database; it runs the plan
// (instance-work.ts), reports what it does over the IPC channel, and at its crash point says so
// and waits for the SIGKILL that ends it. It is started by the lab only, never by hand.

import { ManualClock } from "../outbox/clock.js";
import type { PaymentProvider } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import { openLabOutbox } from "./stores/open-lab-outbox.js";
import { runPlan } from "./instance-work.js";
import type { InstanceReport, StartInstance } from "./killed-instance.js";

const send = (report: InstanceReport, then?: () => void): void => {
  process.send?.(report, undefined, undefined, () => then?.());
};

async function main(start: StartInstance): Promise<void> {
  const clock = new ManualClock(start.clockStart);
  const simulator = new ProviderSimulator({ outcomes: start.outcomes });
  let reported = 0;
  const reportCalls = () => {
    const log = simulator.log();
    for (const call of log.slice(reported)) send({ type: "provider-call", call });
    reported = log.length;
  };
  // The simulator itself, with every call reported to the lab as soon as it has been answered.
  const provider: PaymentProvider = {
    createPayment: async (request) => {
      try {
        return await simulator.createPayment(request);
      } finally {
        reportCalls();
      }
    },
    checkStatus: async (key, options) => {
      try {
        return await simulator.checkStatus(key, options);
      } finally {
        reportCalls();
      }
    },
  };
  const opened = await openLabOutbox(start.target.db, { ...start.target.options, clock });
  opened.store.events.subscribe((event) => send({ type: "event", event }));
  const context = {
    name: start.name,
    store: opened.store,
    repository: opened.payments,
    provider,
    clock,
    note: (text: string) => send({ type: "note", at: clock.now(), text }),
  };
  await runPlan(context, start.plan, (where, pending) => {
    send({ type: "crash-point", at: clock.now(), where, pending });
    // Wait here for the SIGKILL (the message listener below keeps the process alive).
    return new Promise<void>(() => undefined);
  });
  await opened.close();
  send({ type: "finished" }, () => process.exit(0));
}

if (process.send === undefined) {
  process.stderr.write("instance-process is started by `wassal lab` (over an IPC channel), not by hand\n");
  process.exit(2);
}
// The lab went away (it ended or was interrupted): so does its instance.
process.on("disconnect", () => process.exit(1));
// One message starts the instance. The listener stays, so the open IPC channel keeps the process
// alive however idle it is, crash point included.
let started = false;
process.on("message", (start: StartInstance) => {
  if (started || start.type !== "start") return;
  started = true;
  main(start).catch((error: unknown) => send({ type: "failed", message: error instanceof Error ? error.message : String(error) }, () => process.exit(1)));
});
