// The linking rule of OAuth sign-in (src/auth/oauth/identity-accounts.ts), case by case, on the real
// database: which account a provider identity signs in to, and every refusal. The full flows through
// a real OpenID Provider are in test/oauth.test.ts.
import t from 'tap';
import { createAuditTrail } from '../src/audit/audit-trail.ts';
import { accountForIdentity as accountFor } from '../src/auth/oauth/identity-accounts.ts';
import type { ProviderIdentity } from '../src/auth/oauth/provider-clients.ts';
import { createUnprovenPasswords } from '../src/auth/unproven-password.ts';
import { systemClock } from '../src/clock.ts';
import { loadConfig } from '../src/config.ts';
import * as oauth from '../src/db/repositories/oauth.ts';
import * as users from '../src/db/repositories/users.ts';
import { buildTestApp } from './helpers/app.ts';

const { database } = await buildTestApp(t);
const db = database.handle.db;
const audit = createAuditTrail({ clock: systemClock, webhookEvents: new Set() });
const deps = (env: Record<string, string> = {}) => ({
  db,
  config: loadConfig({ NODE_ENV: 'test', ...env }),
  clock: systemClock,
  audit,
});
const open = deps();
const closed = deps({ ALLOW_SIGN_UP: 'false' });
// No account here holds an unproven password (test/unproven-password.test.ts has those).
const unproven = createUnprovenPasswords({ revoked: () => {} }, { send: () => {} }, audit);
const accountForIdentity = (deps: typeof open, provider: string, id: ProviderIdentity) =>
  accountFor(deps, provider, id, unproven);

const identity = (subject: string, email: string | undefined, emailVerified = true): ProviderIdentity => ({
  subject,
  email,
  emailVerified,
  name: 'Someone',
  picture: 'https://cdn.example.com/a.png',
});
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => 'accepted',
    (err: { code?: string }) => err.code ?? String(err),
  );
const passwordAccount = (email: string, verified: boolean) =>
  users.insertPasswordUser(db, { email, passwordHash: 'scrypt$x', name: null, emailVerified: verified });

t.test('a new identity with a verified address: a new verified account without a password', async (t) => {
  const user = await accountForIdentity(open, 'corp', identity('s-1', 'new@example.test'));
  t.equal(user.email, 'new@example.test');
  t.equal(user.email_verified, true);
  t.equal(user.password_hash, null);
  t.same(user.providers, ['corp']);
  t.match(user.profile, { name: 'Someone', avatar_url: 'https://cdn.example.com/a.png' });
  const again = await accountForIdentity(open, 'corp', identity('s-1', 'changed@example.test', false));
  t.equal(again.id, user.id, 'a linked identity signs in, whatever its address says now');
});

t.test('the provider must vouch for the address of an identity it has not linked', async (t) => {
  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-2', 'x@example.test', false))),
    'OAUTH_EMAIL_UNVERIFIED',
  );
  t.equal(await refusal(accountForIdentity(open, 'corp', identity('s-3', undefined))), 'OAUTH_EMAIL_UNVERIFIED');
  await passwordAccount('victim@example.test', true);
  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-4', 'victim@example.test', false))),
    'OAUTH_EMAIL_UNVERIFIED',
    'an unvouched address never reaches an existing account',
  );
});

t.test('an existing account: linked only when its own address is verified', async (t) => {
  const verified = await passwordAccount('owner@example.test', true);
  const linked = await accountForIdentity(open, 'corp', identity('s-5', 'owner@example.test'));
  t.equal(linked.id, verified?.id);
  t.same(linked.providers, ['corp', 'email']);
  const stored = await users.findUserById(db, String(verified?.id));
  t.equal(stored?.password_hash, 'scrypt$x', 'the password is kept');

  await passwordAccount('pending@example.test', false);
  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-6', 'pending@example.test'))),
    'OAUTH_ACCOUNT_UNVERIFIED',
  );
  const pending = await users.findUserByEmail(db, 'pending@example.test');
  t.same(pending?.providers, ['email'], 'nothing was linked');
  t.equal(pending?.email_verified, false, 'nor verified');

  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-7', 'owner@example.test'))),
    'USER_ALREADY_EXISTS',
    'a second identity of the same provider is not linked to an account that has one',
  );
  const other = await accountForIdentity(open, 'other', identity('s-7', 'owner@example.test'));
  t.equal(other.id, verified?.id, 'the same subject at another provider is another identity');
});

t.test('disabled accounts and closed sign-ups', async (t) => {
  const user = await accountForIdentity(open, 'corp', identity('s-8', 'off@example.test'));
  await db.updateTable('users').set({ disabled_at: new Date() }).where('id', '=', user.id).execute();
  t.equal(await refusal(accountForIdentity(open, 'corp', identity('s-8', 'off@example.test'))), 'ACCOUNT_DISABLED');
  t.equal(await refusal(accountForIdentity(open, 'gh', identity('s-9', 'off@example.test'))), 'ACCOUNT_DISABLED');
  t.equal(
    await refusal(accountForIdentity(closed, 'corp', identity('s-10', 'nobody@example.test'))),
    'SIGN_UP_DISABLED',
  );
  const existing = await passwordAccount('member@example.test', true);
  t.equal(
    (await accountForIdentity(closed, 'corp', identity('s-11', 'member@example.test'))).id,
    existing?.id,
    'closed sign-ups still link',
  );
});

t.test('the same new identity signing in twice at once makes one account', async (t) => {
  const [a, b] = await Promise.all([
    accountForIdentity(open, 'corp', identity('s-12', 'twice@example.test')),
    accountForIdentity(open, 'corp', identity('s-12', 'twice@example.test')),
  ]);
  t.equal(a.id, b.id);
  const rows = await db.selectFrom('users').select('id').where('email', '=', 'twice@example.test').execute();
  t.equal(rows.length, 1);
});

/** The audit rows of an account, oldest first. */
const auditRows = (userId: string) =>
  db
    .selectFrom('audit_log')
    .select(['type', 'method', 'session_id', 'details'])
    .where('user_id', '=', userId)
    .orderBy('id')
    .execute();

t.test('every link by address is recorded, with the address the provider vouched for', async (t) => {
  const created = await accountForIdentity(open, 'corp', identity('s-20', 'recorded@example.test'));
  const existing = await passwordAccount('recorded-2@example.test', true);
  const linked = await accountForIdentity(open, 'corp', identity('s-21', 'recorded-2@example.test'));
  t.equal(linked.id, existing?.id);
  for (const [user, subject, made] of [
    [created, 's-20', true],
    [linked, 's-21', false],
  ] as const) {
    const [row] = await oauth.listIdentities(db, user.id);
    t.equal(row?.provider_account_id, subject);
    t.equal(row?.email, user.email, 'the address is kept with the link');
    t.same(await auditRows(user.id), [
      // An account the identity made is a sign-up by that provider first.
      ...(made ? [{ type: 'sign_up', method: 'corp', session_id: null, details: {} }] : []),
      {
        type: 'identity_linked',
        method: 'corp',
        session_id: null,
        details: { provider: 'corp', identityId: row?.id },
      },
    ]);
  }
});

t.test('an administrator account is never linked by address, nor the ADMIN_EMAIL address', async (t) => {
  const admin = await users.insertPasswordUser(db, {
    email: 'root@example.test',
    passwordHash: 'scrypt$x',
    name: null,
    emailVerified: true,
    role: 'admin',
  });
  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-30', 'root@example.test'))),
    'OAUTH_LINK_REQUIRED',
  );
  t.same((await users.findUserById(db, String(admin?.id)))?.providers, ['email'], 'nothing was linked');
  const configured = deps({ ADMIN_EMAIL: 'Future-Admin@example.test', ADMIN_PASSWORD: 'a long admin passphrase' });
  t.equal(
    await refusal(accountForIdentity(configured, 'corp', identity('s-31', 'future-admin@example.test'))),
    'OAUTH_LINK_REQUIRED',
    'ADMIN_EMAIL before its account exists: no account is made there',
  );
  t.equal(await users.findUserByEmail(db, 'future-admin@example.test'), undefined);
});

t.test('OAUTH_<NAME>_LINK_BY_EMAIL=false: existing accounts are not linked, new ones are made', async (t) => {
  const noLinks = deps({
    OAUTH_PROVIDERS: 'strict',
    OAUTH_STRICT_CLIENT_ID: 'c',
    OAUTH_STRICT_CLIENT_SECRET: 's',
    OAUTH_STRICT_ISSUER: 'https://sso.example.test',
    OAUTH_STRICT_LINK_BY_EMAIL: 'false',
  });
  const existing = await passwordAccount('strict@example.test', true);
  t.equal(
    await refusal(accountForIdentity(noLinks, 'strict', identity('s-40', 'strict@example.test'))),
    'OAUTH_LINK_REQUIRED',
  );
  t.same((await users.findUserById(db, String(existing?.id)))?.providers, ['email'], 'nothing was linked');
  const fresh = await accountForIdentity(noLinks, 'strict', identity('s-41', 'strict-new@example.test'));
  t.same(fresh.providers, ['strict'], 'an address without an account signs up as before');
  t.equal(
    (await accountForIdentity(noLinks, 'strict', identity('s-41', 'strict-new@example.test'))).id,
    fresh.id,
    'and its identity signs in',
  );
});

t.test('an identity its owner unlinked is not linked again by address', async (t) => {
  const owner = await passwordAccount('unlinked@example.test', true);
  const ownerId = String(owner?.id);
  await oauth.rememberUnlinked(db, { userId: ownerId, provider: 'corp', subject: 's-50', now: new Date() });
  t.equal(
    await refusal(accountForIdentity(open, 'corp', identity('s-50', 'unlinked@example.test'))),
    'OAUTH_LINK_REQUIRED',
  );
  const other = await accountForIdentity(open, 'corp', identity('s-51', 'unlinked@example.test'));
  t.equal(other.id, ownerId, 'another identity of the provider still links by address');
});
