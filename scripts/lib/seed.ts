import { SingleBar } from 'cli-progress';
import { type Kysely, sql } from 'kysely';
import type { Database } from '../../src/db/schema.ts';

// Synthetic users straight into the database (not through the API), fast: batches of
// INSERT … SELECT generate_series, with realistic names and emails and creation times spread over
// three years. For large loads the search indexes are dropped first and rebuilt at the end
// (building a GIN index once is far quicker than updating it a million times).
//
// 140 first names × 140 last names: a "first.last" search matches about N / 19,600 users (≈ 50 at
// one million); each of the 10 mail domains holds about 10% of the users.

export const firstNames =
  `james mary robert patricia john jennifer michael linda david elizabeth william barbara richard susan joseph jessica thomas sarah christopher karen charles lisa daniel nancy matthew betty anthony sandra mark margaret donald ashley steven kimberly andrew emily paul donna joshua michelle kenneth carol kevin amanda brian melissa george deborah timothy stephanie ronald dorothy jason rebecca edward sharon jeffrey laura ryan cynthia jacob amy gary kathleen nicholas angela eric shirley jonathan brenda stephen emma larry anna justin pamela scott nicole brandon samantha benjamin katherine samuel christine gregory helen alexander debra frank rachel patrick carolyn raymond janet jack maria dennis olivia jerry heather tyler diane aaron julie jose joyce adam victoria nathan ruth henry virginia zachary lauren douglas kelly peter christina kyle joan noah evelyn ethan judith jeremy andrea walter hannah christian megan keith cheryl roger jacqueline terry martha austin madison sean teresa gerald gloria carl sara harold janice dylan abigail arthur kathryn lawrence`.split(
    ' ',
  );
export const lastNames =
  `smith johnson williams brown jones garcia miller davis rodriguez martinez hernandez lopez gonzalez wilson anderson thomas taylor moore jackson martin lee perez thompson white harris sanchez clark ramirez lewis robinson walker young allen king wright scott torres nguyen hill flores green adams nelson baker hall rivera campbell mitchell carter roberts gomez phillips evans turner diaz parker cruz edwards collins reyes stewart morris morales murphy cook rogers gutierrez ortiz morgan cooper peterson bailey reed kelly howard ramos kim cox ward richardson watson brooks chavez wood james bennett gray mendoza ruiz hughes price alvarez castillo sanders patel myers long ross foster jimenez powell jenkins perry russell sullivan bell coleman butler henderson barnes gonzales fisher vasquez simmons romero jordan patterson alexander hamilton graham reynolds griffin wallace moreno west cole hayes bryant herrera gibson ellis tran medina aguilar stevens murray ford castro marshall owens harrison fernandez mcdonald woods washington kennedy wells`.split(
    ' ',
  );
export const domains = [
  'gmail.com',
  'yahoo.com',
  'outlook.com',
  'hotmail.com',
  'icloud.com',
  'proton.me',
  'example.com',
  'example.org',
  'mail.com',
  'fastmail.com',
];

const searchIndexes = ['users_search_trgm_idx', 'users_search_grams_idx'];

/** Adds `total` users to a migrated database, with a progress bar on stderr; returns the seconds it took. */
export async function seedUsers(db: Kysely<Database>, total: number, batch = 25_000): Promise<number> {
  const started = Date.now();
  const { rows: offsetRows } = await sql<{ n: number }>`select coalesce(max(n), 0)::int as n from user_count`.execute(
    db,
  );
  const base = offsetRows[0]?.n ?? 0; // keeps emails unique when seeding twice
  const rebuild = total >= 50_000;
  let definitions: string[] = [];
  if (rebuild) {
    const defs = await sql<{
      indexdef: string;
    }>`select indexdef from pg_indexes where indexname in (${sql.join(searchIndexes)})`.execute(db);
    definitions = defs.rows.map((r) => r.indexdef);
    for (const name of searchIndexes) await sql`drop index if exists ${sql.id(name)}`.execute(db);
  }
  const bar = new SingleBar({
    format: 'seeding users [{bar}] {percentage}% | {value}/{total} | {duration_formatted} elapsed, eta {eta_formatted}',
  });
  bar.start(total, 0);
  const first = sql.val(firstNames);
  const last = sql.val(lastNames);
  const dom = sql.val(domains);
  for (let start = 1; start <= total; start += batch) {
    const end = Math.min(start + batch - 1, total);
    await sql`
      with generated as (
        select i + ${base} as n,
          (${first}::text[])[1 + (i * 7919) % ${firstNames.length}] as f,
          (${last}::text[])[1 + ((i * 104729) / ${firstNames.length}) % ${lastNames.length}] as l,
          (${dom}::text[])[1 + (i * 31) % ${domains.length}] as d,
          now() - (((i::bigint * 2654435761) % (3 * 365 * 86400)) * interval '1 second') as t
        from generate_series(${start}::bigint, ${end}::bigint) as i
      ), inserted as (
        insert into users (email, profile, email_verified, created_at, updated_at)
        select f || '.' || l || n || '@' || d,
          jsonb_build_object('name', initcap(f) || ' ' || initcap(l), 'avatar_url', null),
          n % 5 <> 0, t, t
        from generated
        returning id, email
      )
      insert into user_providers (user_id, provider, provider_account_id)
      select id, 'email', email from inserted
    `.execute(db);
    bar.update(end);
  }
  bar.stop();
  if (rebuild) {
    process.stderr.write('rebuilding the search indexes… ');
    const t0 = Date.now();
    // One connection per index, so that the builds run side by side; GIN builds sort their
    // entries in maintenance_work_mem: more memory, far fewer merge passes.
    await Promise.all(
      definitions.map((def) =>
        db.connection().execute(async (conn) => {
          await sql`set maintenance_work_mem = '512MB'`.execute(conn);
          await sql.raw(def).execute(conn);
        }),
      ),
    );
    process.stderr.write(`${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
  process.stderr.write('vacuum analyze… ');
  const t1 = Date.now();
  await sql`vacuum analyze users`.execute(db);
  await sql`vacuum analyze user_providers`.execute(db);
  process.stderr.write(`${((Date.now() - t1) / 1000).toFixed(1)} s\n`);
  return (Date.now() - started) / 1000;
}
