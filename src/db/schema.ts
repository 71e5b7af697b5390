import type { ColumnType, Generated } from 'kysely';

/** Key-value settings the service keeps for itself (for example a generated signing key in development). */
export interface AppSettingsTable {
  key: string;
  value: string;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, never, Date>;
}

/** The tables Kysely knows about; one entry per table, named as in SQL. */
export interface Database {
  app_settings: AppSettingsTable;
}

export type { Generated };
