// "wassal/prisma": enqueue inside a Prisma interactive transaction (see src/integrations/prisma.ts).

export { enqueue, fromPrisma, type PrismaTransactionClient } from "./integrations/prisma.js";
