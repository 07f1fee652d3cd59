// What the README's TypeORM example assumes: the app's DataSource and entity, and a store.
import type { DataSource } from "typeorm";
import type { PostgresOutboxStore } from "wassal/postgres";

declare class Order {
  id: string;
}
declare const dataSource: DataSource;
declare const store: PostgresOutboxStore;
