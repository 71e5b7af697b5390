// Two tabs of one browser (or two requests of one client) refreshing with the same token at the
// same moment both get a working session, and whichever token the client ends up holding refreshes
// again, for every client type.
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { buildRefreshTestApp, CLIENTS, held, INTERVAL_SECONDS } from './helpers/refresh-clients.ts';

for (const client of CLIENTS) {
  t.test(client, async (t) => {
    const shared = await buildRefreshTestApp(t);

    t.test(`${client}: two refreshes with the same token at the same moment both succeed`, async (t) => {
      const { session, call, current, clock } = shared;
      for (const keep of [0, 1] as const) {
        for (let round = 0; round < 2; round++) {
          const s = await session(`tabs-${client}-${keep}-${round}`, client);
          const answers = await Promise.all([call('refresh', s), call('refresh', s)]);
          t.same(
            answers.map((a) => a.statusCode),
            [200, 200],
            `keep ${keep}, round ${round}: both tabs get a session (${answers.map((a) => a.body.slice(0, 80)).join(' | ')})`,
          );
          if (answers.some((a) => a.statusCode !== 200)) continue;
          // A cookie jar keeps whichever Set-Cookie came last: either answer may be the one held.
          const kept = held(client, answers[keep] as LightMyRequestResponse);
          t.equal((await current(kept)).statusCode, 200, 'the kept answer’s access token works');
          clock.advance(INTERVAL_SECONDS + 5);
          const again = await call('refresh', kept);
          t.equal(again.statusCode, 200, `keep ${keep}: the token held refreshes again after the interval`);
          if (again.statusCode === 200) t.equal((await current(held(client, again))).statusCode, 200);
        }
      }
    });
  });
}
