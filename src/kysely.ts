// "wassal/kysely": enqueue inside a Kysely transaction (see src/integrations/kysely.ts).

export { enqueue, fromKysely, type KyselyTransaction } from "./integrations/kysely.js";
