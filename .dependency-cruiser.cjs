// The layering rules of docs/architecture.md, checked by `npm run lint` (dependency-cruiser).
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "core-knows-no-store",
      comment:
        "src/outbox is the core: it imports no store, domain, lab, chaos, CLI or runtime code, and no npm package but croner, the cron parser that schedules.ts reads its expressions with.",
      severity: "error",
      from: { path: "^src/outbox/" },
      to: { pathNot: ["^src/outbox/", "^node:", "^node_modules/croner/"], dependencyTypesNot: ["core"] },
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
      name: "shards-on-the-core",
      comment:
        "The sharded outbox routes to stores through the store contract and runs the core's Worker: it imports no store, relay, domain, lab, CLI or runtime code.",
      severity: "error",
      from: { path: "^src/shards/" },
      to: { path: "^src/(stores|relay|payments|lab|chaos|cli|runtime|dashboard|observability|integrations)/" },
    },
    {
      name: "stores-know-no-lab",
      comment:
        "The stores are the library's: they import nothing of the payments lab, the chaos harness, the runtime, the CLI, the dashboard, the relay or observability. The lab reaches a store through its public class (src/lab/stores).",
      severity: "error",
      from: { path: "^src/stores/" },
      to: { path: "^src/(payments|lab|chaos|runtime|cli|dashboard|relay|observability)/" },
    },
    {
      name: "database-drivers-only-in-stores",
      comment:
        "SQL lives only under src/stores and, for the lab's own tables, src/lab/stores (scripts/lint-sql.mjs checks the text); so do the database drivers.",
      severity: "error",
      from: { path: "^src/", pathNot: ["^src/stores/", "^src/lab/stores/"] },
      to: { path: "node_modules/(pg|better-sqlite3|mysql2)/" },
    },
    {
      name: "store-internals-stay-in-stores",
      comment:
        "Outside src/stores, code reaches a database through the store classes, PostgreSQL's WAL feed and the top-level store modules (open-outbox, backends), never a driver's SQL or connection helpers; only the lab's own database wing (src/lab/stores) builds on them for its tables.",
      severity: "error",
      from: { path: "^src/", pathNot: ["^src/stores/", "^src/lab/stores/", "^src/chaos/lock-holder\\.ts$"] },
      to: { path: "^src/stores/[^/]+/", pathNot: ["-outbox-store\\.ts$", "/wal-feed\\.ts$"] },
    },
    {
      name: "cli-only-parses-and-calls",
      comment:
        "The CLI parses arguments and calls the library: it opens stores only through open-outbox (the lab's through src/lab/stores) and imports no store module itself.",
      severity: "error",
      from: { path: "^src/cli/" },
      to: { path: "^src/stores/", pathNot: "^src/stores/open-outbox\\.ts$" },
    },
    {
      name: "entry-points-are-faces",
      comment:
        "Nothing inside the library imports its own entry points: every file directly in src/ is one (index, sqlite, postgres, mariadb, observability, lab, relay, kysely, knex, drizzle, typeorm, prisma).",
      severity: "error",
      from: { path: "^src/.+/" },
      to: { path: "^src/[^/]+\\.ts$" },
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
