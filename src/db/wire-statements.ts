// Statements a PostgreSQL client may not send to the embedded database: PGlite runs in the service's
// own process, and COPY from the client (`COPY … FROM STDIN`, psql's `\copy … from`) or to or from a
// program ends that process or hangs it. COPY from the client is found in the words of each
// statement, outside comments, string literals, quoted names and dollar-quoted bodies (where PL/pgSQL
// refuses it anyway); PROGRAM anywhere in the text, bodies included.

const IDENTIFIER = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

/** The statement's words with comments, literals and quoted names left out, statements split at `;`. */
export function statementWords(text: string): string[][] {
  const statements: string[][] = [[]];
  let word = '';
  const endWord = () => {
    if (word !== '') statements[statements.length - 1]?.push(word.toLowerCase());
    word = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === '-' && next === '-') {
      endWord();
      const eol = text.indexOf('\n', i);
      i = eol < 0 ? text.length : eol + 1;
    } else if (c === '/' && next === '*') {
      endWord();
      let depth = 1;
      i += 2;
      while (i < text.length && depth > 0) {
        const pair = text.slice(i, i + 2);
        if (pair === '/*' || pair === '*/') {
          depth += pair === '/*' ? 1 : -1;
          i += 2;
        } else i++;
      }
    } else if (c === "'" || c === '"') {
      // E'…' strings take backslash escapes; '' and "" double their quote everywhere.
      const escapes = c === "'" && (word === 'e' || word === 'E');
      endWord();
      i++;
      while (i < text.length) {
        if (escapes && text[i] === '\\') i += 2;
        else if (text[i] === c && text[i + 1] === c) i += 2;
        else if (text[i] === c) break;
        else i++;
      }
      i++;
    } else if (c === '$' && word === '' && DOLLAR_TAG.test(text.slice(i, i + 64))) {
      const tag = (DOLLAR_TAG.exec(text.slice(i, i + 64)) as RegExpExecArray)[0];
      const close = text.indexOf(tag, i + tag.length);
      i = close < 0 ? text.length : close + tag.length;
    } else if (IDENTIFIER.test(c)) {
      word += c;
      i++;
    } else {
      endWord();
      if (c === ';') statements.push([]);
      i++;
    }
  }
  endWord();
  return statements.filter((words) => words.length > 0);
}

/** Why `text` is refused, or undefined when it may run. */
export function refusedStatement(text: string): string | undefined {
  for (const words of statementWords(text)) {
    if (words.includes('copy') && words.includes('stdin'))
      return 'COPY FROM STDIN (psql: \\copy … from) is not available on the embedded database: use INSERT instead';
  }
  // PROGRAM also inside a function body or an EXECUTE string, where PL/pgSQL would run it.
  if (/\bcopy\b/i.test(text) && /\bprogram\b/i.test(text))
    return 'COPY with PROGRAM is not available on the embedded database';
  return undefined;
}
