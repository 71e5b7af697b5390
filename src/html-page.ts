// The service's few HTML pages (the emailed links' pages, the development inbox): one look, no
// script, every value escaped.

export const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

/** A page: `heading` as its h1, `appName` above it and in the title, `body` as given (already HTML). */
export function htmlPage(options: { heading: string; appName: string; body: string; wide?: boolean }): string {
  const { heading, appName, body } = options;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex">
<title>${escapeHtml(`${heading} · ${appName}`)}</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: ${options.wide ? '56rem' : '28rem'}; margin: 4rem auto; padding: 0 1rem; color: #1f2328; }
  .app { color: #59636e; font-size: 0.95rem; margin: 0; }
  h1 { margin-top: 0.25rem; }
  label { display: block; margin-top: 1rem; }
  input[type=password] { width: 100%; box-sizing: border-box; font-size: 1rem; padding: 0.5rem; margin-top: 0.25rem; }
  button { margin-top: 1.5rem; font-size: 1rem; padding: 0.6rem 1.2rem; border-radius: 6px; border: 0; background: #1f6feb; color: #fff; cursor: pointer; }
  .error { color: #cf222e; }
  .mail { border: 1px solid #d1d9e0; border-radius: 6px; padding: 0.75rem 1rem; margin: 1rem 0; }
  .mail h2 { font-size: 1.05rem; margin: 0 0 0.25rem; }
  .meta { color: #59636e; font-size: 0.9rem; margin: 0; }
  .code { font: 1.6rem ui-monospace, monospace; letter-spacing: 0.2em; user-select: all; }
  .link { font: 0.85rem ui-monospace, monospace; word-break: break-all; user-select: all; }
  details pre { white-space: pre-wrap; font-size: 0.85rem; }
</style>
</head>
<body>
<p class="app">${escapeHtml(appName)}</p>
<h1>${escapeHtml(heading)}</h1>
${body}
</body>
</html>
`;
}
