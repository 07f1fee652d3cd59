// The layering rules of docs/architecture.md, checked by `npm run lint` (dependency-cruiser).
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "core-knows-no-store",
      comment: "src/outbox is the core: it imports no store, domain, lab, chaos, CLI or runtime code, and no npm package.",
      severity: "error",
      from: { path: "^src/outbox/" },
      to: { pathNot: ["^src/outbox/", "^node:"], dependencyTypesNot: ["core"] },
    },
    {
      name: "domain-knows-no-store",
      comment: "The payments domain works through the store contract; it imports no store, lab, chaos, CLI or runtime code.",
      severity: "error",
      from: { path: "^src/payments/" },
      to: { path: "^src/(stores|lab|chaos|cli|runtime|observability)/" },
    },
    {
      name: "relay-on-the-core",
      comment: "The relay works through the store contract and the Worker: it imports no store, domain, lab, chaos, CLI or runtime code.",
      severity: "error",
      from: { path: "^src/relay/" },
      to: { path: "^src/(stores|payments|lab|chaos|cli|runtime)/" },
    },
    {
      name: "integrations-on-the-core",
      comment:
        "An integration turns another library's transaction into a ForeignTransaction: it imports the core alone, and holds no SQL (the stores give it theirs).",
      severity: "error",
      from: { path: "^src/integrations/" },
      to: { path: "^src/(stores|relay|payments|lab|chaos|cli|runtime|observability)/" },
    },
    {
      name: "database-drivers-only-in-stores",
      comment: "SQL lives only under src/stores (scripts/lint-sql.mjs checks the text); so do the database drivers.",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/stores/" },
      to: { path: "node_modules/(pg|better-sqlite3)/" },
    },
    {
      name: "store-internals-stay-in-stores",
      comment:
        "Outside src/stores, code reaches a database through the store classes, the payments repositories and the top-level store modules (open-outbox, admin, unleased), never a driver's SQL or connection helpers.",
      severity: "error",
      from: { path: "^src/", pathNot: ["^src/stores/", "^src/chaos/lock-holder\\.ts$"] },
      to: { path: "^src/stores/(sqlite|postgres)/", pathNot: ["-outbox-store\\.ts$", "payments-repository\\.ts$"] },
    },
    {
      name: "cli-only-parses-and-calls",
      comment: "The CLI parses arguments and calls the library: it opens stores only through open-outbox and imports no store module itself.",
      severity: "error",
      from: { path: "^src/cli/" },
      to: { path: "^src/stores/", pathNot: "^src/stores/open-outbox\\.ts$" },
    },
    {
      name: "entry-points-are-faces",
      comment:
        "Nothing inside the library imports its own entry points (index, sqlite, postgres, observability, lab, relay, kysely, knex, drizzle, typeorm, prisma).",
      severity: "error",
      from: { path: "^src/.+/" },
      to: { path: "^src/(index|sqlite|postgres|observability|lab|relay|kysely|knex|drizzle|typeorm|prisma)\\.ts$" },
    },
    {
      name: "no-circular",
      severity: "error",
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: false,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default", "types"] },
  },
};
