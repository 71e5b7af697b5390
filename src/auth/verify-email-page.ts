import type { FastifyInstance } from 'fastify';

// The page a verification link opens. Opening it changes nothing (mail scanners follow links): the
// token is only spent when the person presses the button, which POSTs it to the verify operation.
const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Confirm your email address</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 28rem; margin: 4rem auto; padding: 0 1rem; color: #1f2328; }
  button { font-size: 1rem; padding: 0.6rem 1.2rem; border-radius: 6px; border: 0; background: #1f6feb; color: #fff; cursor: pointer; }
  button[disabled] { opacity: 0.6; cursor: default; }
  #result { margin-top: 1.5rem; }
</style>
</head>
<body>
<h1>Confirm your email address</h1>
<form id="verify" method="post" action="/api/auth/email/verify">
  <p>Press the button to confirm the address this link was sent to.</p>
  <button type="submit">Confirm my email</button>
</form>
<p id="result" role="status"></p>
<script src="/auth/verify-email.js"></script>
</body>
</html>
`;

const script = `'use strict';
(function () {
  var form = document.getElementById('verify');
  var result = document.getElementById('result');
  var params = new URLSearchParams(location.search);
  var token = params.get('token') || '';
  // Where to go afterwards, as the link carries it; the service checks it before it verifies anything.
  var redirectTo = params.get('redirect_to');
  if (!/^[0-9a-fA-F]{64}$/.test(token)) {
    form.hidden = true;
    result.textContent = 'This link is incomplete. Open the link from your email again, or enter the 6-digit code in the app.';
    return;
  }
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    form.querySelector('button').disabled = true;
    result.textContent = 'Confirming…';
    fetch('/api/auth/email/verify?client_type=web', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(redirectTo ? { otp: token, redirectTo: redirectTo } : { otp: token })
    }).then(function (res) {
      return res.json().then(function (body) { return { ok: res.ok, body: body }; });
    }).then(function (r) {
      if (r.ok && r.body.redirectTo) { location.assign(r.body.redirectTo); return; }
      result.textContent = r.ok
        ? 'Your email address is confirmed. You are signed in and can close this page.'
        : (r.body && r.body.message) || 'This link could not be used.';
      if (!r.ok) form.querySelector('button').disabled = false;
    }).catch(function () {
      result.textContent = 'The service could not be reached. Try again.';
      form.querySelector('button').disabled = false;
    });
  });
})();
`;

/** GET /auth/verify-email?token=…: the page that verification links open. Not part of the JSON API. */
export function registerVerifyEmailPage(app: FastifyInstance): void {
  // Cache-Control: no-store and nosniff come from the app's security headers (security-headers.ts).
  const security = {
    'content-security-policy':
      "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    'referrer-policy': 'no-referrer',
  };
  app.get('/auth/verify-email', { schema: { hide: true } }, async (_request, reply) =>
    reply.headers(security).type('text/html; charset=utf-8').send(page),
  );
  app.get('/auth/verify-email.js', { schema: { hide: true } }, async (_request, reply) =>
    reply.headers(security).type('text/javascript; charset=utf-8').send(script),
  );
}
