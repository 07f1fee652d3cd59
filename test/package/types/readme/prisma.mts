// What the README's Prisma example assumes: the app's generated client (one model, Order; the
// test generates it), and a store. Not part of the repository's own type-check.
import type { PostgresOutboxStore } from "wassal/postgres";
import type { PrismaClient } from "../prisma-one/client.js";

declare const prisma: PrismaClient;
declare const store: PostgresOutboxStore;
