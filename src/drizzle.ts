// "wassal/drizzle": enqueue inside a Drizzle transaction (see src/integrations/drizzle.ts).

export { type DrizzlePgTransaction, enqueue, fromDrizzle } from "./integrations/drizzle.js";
