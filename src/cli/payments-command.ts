// `wassal payments`: create payments (each with its reconciliation message) and list them.

import { Command } from "commander";
import cliProgress from "cli-progress";
import { checkCreateRequest, PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import { type LabOutbox, withLabOutbox } from "../lab/stores/open-lab-outbox.js";
import { integer } from "./options.js";
import { field, out, printJson } from "./output.js";
import { type Access, dbOption, schemaOption, storeOptions, synchronousOption } from "./shared-options.js";

interface Common {
  db: string;
  schema?: string;
  synchronous?: "FULL" | "NORMAL";
  json?: boolean;
}

function withPayments<T>(options: Common, access: Access, work: (outbox: LabOutbox, service: PaymentsService<unknown>) => Promise<T>): Promise<T> {
  return withLabOutbox(options.db, storeOptions(options, access), (outbox) =>
    work(outbox, new PaymentsService({ store: outbox.store, repository: outbox.payments, provider: new ProviderSimulator({ answerUnknownKeys: true }) })),
  );
}

function common(command: Command): Command {
  return command.addOption(dbOption().makeOptionMandatory()).addOption(schemaOption()).addOption(synchronousOption()).option("--json", "print JSON");
}

export function paymentsCommand(): Command {
  const payments = new Command("payments").description("create and list payments: each payment commits with its reconciliation message");

  payments.addCommand(
    common(new Command("create"))
      .description("create one payment (a known idempotency key returns the existing one and writes nothing)")
      .requiredOption("--key <idempotency-key>", "the idempotency key, e.g. PAY-001")
      .requiredOption("--amount <minor-units>", "amount in minor units, e.g. 12500 for 125.00", integer(1))
      .requiredOption("--currency <code>", "ISO 4217 code in capitals, e.g. EUR")
      .action(async (options: Common & { key: string; amount: number; currency: string }) => {
        // Refuse a bad request before anything is opened or created.
        const request = checkCreateRequest({ idempotencyKey: options.key, amount: options.amount, currency: options.currency });
        await withPayments(options, "write", async (_outbox, service) => {
          const result = await service.create(request);
          if (options.json) printJson(result);
          else
            out(
              `${result.created ? "created" : "already exists"}: payment ${result.payment.id} ${result.payment.idempotencyKey} ${result.payment.amount} ${result.payment.currency} (${result.payment.status})\n`,
            );
        });
      }),
  );

  payments.addCommand(
    common(new Command("seed"))
      .description("create many payments with keys <prefix>-000001, <prefix>-000002, … (existing keys are left alone)")
      .requiredOption("--count <n>", "how many payments", integer(1, 10_000_000))
      .option("--prefix <prefix>", "key prefix", "PAY")
      .option("--start <n>", "first number", integer(1), 1)
      .option("--amount <minor-units>", "amount of each payment", integer(1), 1000)
      .option("--currency <code>", "currency of each payment", "EUR")
      .action(async (options: Common & { count: number; prefix: string; start: number; amount: number; currency: string }) => {
        checkCreateRequest({ idempotencyKey: `${options.prefix}-000001`, amount: options.amount, currency: options.currency });
        await withPayments(options, "write", async (outbox, service) => {
          const bar =
            process.stderr.isTTY && !options.json
              ? new cliProgress.SingleBar(
                  { format: "seeding {bar} {value}/{total} payments, {eta}s left", stream: process.stderr },
                  cliProgress.Presets.shades_classic,
                )
              : undefined;
          bar?.start(options.count, 0);
          let created = 0;
          for (let n = 0; n < options.count; n += 1) {
            const key = `${options.prefix}-${String(options.start + n).padStart(6, "0")}`;
            const result = await service.create({ idempotencyKey: key, amount: options.amount, currency: options.currency });
            if (result.created) created += 1;
            bar?.increment();
          }
          bar?.stop();
          const summary = { db: outbox.location, requested: options.count, created, existing: options.count - created };
          if (options.json) printJson(summary);
          else out(`created ${created} payments (${summary.existing} already existed) in ${outbox.location}\n`);
        });
      }),
  );

  payments.addCommand(
    common(new Command("list"))
      .description("list payments")
      .option("--limit <n>", "show at most n (newest last)", integer(1), 100)
      .action(async (options: Common & { limit: number }) => {
        await withPayments(options, "repair", async (_outbox, service) => {
          const all = await service.list();
          const shown = all.slice(-options.limit);
          if (options.json) printJson(shown);
          else for (const p of shown) out(`${p.id}\t${field(p.idempotencyKey)}\t${p.amount} ${field(p.currency)}\t${p.status}\t${field(p.transactionId)}\n`);
        });
      }),
  );

  return payments;
}
