// "wassal/knex": enqueue inside a Knex transaction (see src/integrations/knex.ts).

export { enqueue, fromKnex } from "./integrations/knex.js";
