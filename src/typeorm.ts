// "wassal/typeorm": enqueue inside a TypeORM transaction (see src/integrations/typeorm.ts).

export { enqueue, fromTypeOrm } from "./integrations/typeorm.js";
