// A sign-in reads the account, spends ~100 ms checking the password, then opens its session. A
// password change (or a promotion) that commits in between must not leave that session open: the
// interleaving is forced here by changing the password the moment the sign-in has read the account.
import type {
  KyselyPlugin,
  PluginTransformQueryArgs,
  PluginTransformResultArgs,
  QueryResult,
  RootOperationNode,
  UnknownRow,
} from 'kysely';
import t from 'tap';
import { buildApp } from '../src/app.ts';
import { hashPassword } from '../src/auth/crypto.ts';
import { loadConfig } from '../src/config.ts';
import { revokeUserSessions } from '../src/db/repositories/sessions.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { createTestDatabase } from './helpers/database.ts';

/**
 * Calls `onRead` once, right after a statement reading an account has returned its row (so the
 * sign-in holds the old password hash), without waiting for it: the connection is free again.
 */
class AccountReadHook implements KyselyPlugin {
  onRead: (() => void) | undefined;
  readonly #reads = new WeakSet<object>();
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    const node = args.node as { kind: string; from?: { froms?: { table?: { identifier?: { name?: string } } }[] } };
    const table = node.from?.froms?.[0]?.table?.identifier?.name;
    if (node.kind === 'SelectQueryNode' && table === 'users') this.#reads.add(args.queryId);
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (this.#reads.has(args.queryId) && args.result.rows.length > 0 && this.onRead) {
      const fire = this.onRead;
      this.onRead = undefined;
      fire();
    }
    return args.result;
  }
}

t.test('a sign-in that read the old password opens no session once the password has changed', async (t) => {
  const database = await createTestDatabase();
  const hook = new AccountReadHook();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: database.url,
    REQUIRE_EMAIL_VERIFICATION: 'false',
  });
  const app = await buildApp(config, {
    database: { ...database.handle, db: database.handle.db.withPlugin(hook) },
    logger: false,
  });
  await app.ready();
  t.teardown(async () => {
    await app.close();
    await database.drop();
  });
  const db = database.handle.db;
  const email = newEmail('race');
  const signUp = await app.inject({
    method: 'POST',
    url: '/api/auth/users?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  t.equal(signUp.statusCode, 201);
  const userId = (JSON.parse(signUp.body) as { user: { id: string } }).user.id;
  const newHash = await hashPassword('a brand new password');

  // The change commits while the sign-in is checking the old password.
  let changed: Promise<string[]> | undefined;
  hook.onRead = () => {
    changed = db.transaction().execute(async (trx) => {
      await trx.updateTable('users').set({ password_hash: newHash }).where('id', '=', userId).execute();
      return revokeUserSessions(trx, userId, new Date());
    });
  };
  const signIn = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  t.ok(changed, 'the password changed after the sign-in read the account');
  await changed;
  t.equal(signIn.statusCode, 401, 'the sign-in with the old password is refused');
  const live = await db
    .selectFrom('sessions')
    .select('id')
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .execute();
  t.same(live, [], 'no session outlives the password change');
});
