/**
 * A loopback fake of GitHub's OAuth app endpoints: /login/oauth/authorize (signs the scripted user in
 * at once), /login/oauth/access_token, and the API's /user and /user/emails, all on one server, so
 * OAUTH_GITHUB_BASE_URL and OAUTH_GITHUB_API_URL are both `fake.url`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GithubEmail {
  email: string;
  primary: boolean;
  verified: boolean;
}

export interface GithubUser {
  id: number;
  login: string;
  name: string | null;
  emails: GithubEmail[];
}

export interface GithubRequest {
  method: string;
  /** The path without the query. */
  path: string;
  /** The query string, `?` included, or ''. */
  query: string;
  authorization: string | undefined;
}

export interface GithubFake {
  /** `http://127.0.0.1:<port>`: the OAuth base and the API base. */
  url: string;
  clientId: string;
  clientSecret: string;
  /** Who signs in at the next authorization (captured when the code is issued). */
  user: GithubUser;
  /** When true, the next authorization is refused (error=access_denied); then it resets. */
  denyNext: boolean;
  /**
   * The HTTP status of token errors. GitHub itself answers 200 with `{ error }`; the default 400 is
   * what OAuth clients (openid-client) expect.
   */
  tokenErrorStatus: number;
  /** Every request received, in order. */
  requests: GithubRequest[];
  /** Every access token issued, in order. */
  tokens: string[];
  close(): Promise<void>;
}

interface IssuedCode {
  clientId: string;
  redirectUri: string;
  codeChallenge: string | undefined;
  codeChallengeMethod: string;
  scope: string;
  user: GithubUser;
}

export async function startGithubFake(): Promise<GithubFake> {
  const codes = new Map<string, IssuedCode>();
  const accessTokens = new Map<string, GithubUser>();
  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) json(res, 500, { message: String(err) });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const fake: GithubFake = {
    url,
    clientId: 'github-client-id',
    clientSecret: 'github-client-secret-0123456789abcdef',
    user: {
      id: 4242,
      login: 'octo-tester',
      name: 'Octo Tester',
      emails: [{ email: 'octo@example.test', primary: true, verified: true }],
    },
    denyNext: false,
    tokenErrorStatus: 400,
    requests: [],
    tokens: [],
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = new URL(req.url ?? '/', url);
    const method = req.method ?? 'GET';
    fake.requests.push({
      method,
      path: target.pathname,
      query: target.search,
      authorization: req.headers.authorization,
    });
    const route = `${method} ${target.pathname}`;
    if (route === 'GET /login/oauth/authorize') return authorize(target.searchParams, res);
    if (route === 'POST /login/oauth/access_token') return accessToken(req, res);
    if (route === 'GET /user' || route === 'GET /user/emails') {
      const user = accessTokens.get(/^(?:bearer|token) (\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '');
      if (!user) {
        return json(res, 401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
      }
      if (target.pathname === '/user/emails') return json(res, 200, user.emails);
      const avatar = `https://avatars.githubusercontent.com/u/${user.id}?v=4`;
      return json(res, 200, { id: user.id, login: user.login, name: user.name, avatar_url: avatar, email: null });
    }
    json(res, 404, { message: 'Not Found' });
  }

  function authorize(query: URLSearchParams, res: ServerResponse): void {
    const redirectUri = query.get('redirect_uri');
    if (query.get('client_id') !== fake.clientId || !redirectUri || !URL.canParse(redirectUri)) {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('unknown client_id or missing redirect_uri');
      return;
    }
    const back = new URL(redirectUri);
    if (fake.denyNext) {
      fake.denyNext = false;
      back.searchParams.set('error', 'access_denied');
      back.searchParams.set('error_description', 'The user has denied your application access.');
    } else {
      const code = randomBytes(10).toString('hex');
      codes.set(code, {
        clientId: fake.clientId,
        redirectUri,
        codeChallenge: query.get('code_challenge') ?? undefined,
        codeChallengeMethod: query.get('code_challenge_method') ?? 'plain',
        scope: query.get('scope') ?? '',
        user: structuredClone(fake.user),
      });
      back.searchParams.set('code', code);
    }
    const state = query.get('state');
    if (state !== null) back.searchParams.set('state', state);
    res.writeHead(302, { location: back.href }).end();
  }

  async function accessToken(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const body: Record<string, string> = req.headers['content-type']?.includes('json')
      ? JSON.parse(raw || '{}')
      : Object.fromEntries(new URLSearchParams(raw));
    const basic = /^basic (\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const [basicId, basicSecret] = basic
      ? Buffer.from(basic, 'base64').toString().split(':').map(decodeURIComponent)
      : [];
    const clientId = basicId ?? body.client_id;
    const clientSecret = basicSecret ?? body.client_secret;
    const wantsJson = req.headers.accept?.includes('application/json') ?? false;
    // JSON when asked for (as the service does), else form-encoded, as GitHub answers.
    const reply = (status: number, fields: Record<string, string>): void => {
      if (wantsJson) {
        json(res, status, fields);
      } else {
        res.writeHead(status, { 'content-type': 'application/x-www-form-urlencoded' });
        res.end(new URLSearchParams(fields).toString());
      }
    };
    const fail = (error: string, description: string) =>
      reply(fake.tokenErrorStatus, { error, error_description: description });

    if (clientId !== fake.clientId || clientSecret !== fake.clientSecret) {
      return fail('incorrect_client_credentials', 'The client_id and/or client_secret passed are incorrect.');
    }
    const issued = codes.get(body.code ?? '');
    codes.delete(body.code ?? '');
    if (!issued || issued.clientId !== clientId) {
      return fail('bad_verification_code', 'The code passed is incorrect or expired.');
    }
    if (body.redirect_uri !== undefined && body.redirect_uri !== issued.redirectUri) {
      return fail(
        'redirect_uri_mismatch',
        'The redirect_uri MUST match the registered callback URL for this application.',
      );
    }
    if (issued.codeChallenge !== undefined) {
      const verifier = body.code_verifier ?? '';
      const expected =
        issued.codeChallengeMethod === 'S256' ? createHash('sha256').update(verifier).digest('base64url') : verifier;
      if (expected !== issued.codeChallenge) {
        return fail('bad_verification_code', 'The code_verifier does not match the code_challenge.');
      }
    }
    const token = `gho_${randomBytes(18).toString('hex')}`;
    accessTokens.set(token, issued.user);
    fake.tokens.push(token);
    reply(200, { access_token: token, token_type: 'bearer', scope: issued.scope.split(/[\s,]+/).join(',') });
  }

  return fake;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));
}
