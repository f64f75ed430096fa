#!/usr/bin/env node
// Generates tests/vectors/collation-vectors.json: the sign of JavaScript's `a.localeCompare(b)` (no
// arguments: the ql3 collation of task-attempts.md §3A) for pairs of strings over U+0000..U+007F.
//
//   LC_ALL=C node tests/vectors/generate_collation_vectors.js > tests/vectors/collation-vectors.json
//
// Deterministic: its own seeded PRNG (mulberry32), no Math.random, no clock, no environment beyond the
// node binary. `localeCompare` with no arguments uses the process's default locale, which node takes
// from LC_ALL/LANG: a tailored locale (da, sv, lt, ...) reorders ASCII, so the generator refuses to run
// unless that default is en-US (what ql3 runs with), and it checks every pair against ICU's root
// collation (`new Intl.Collator('und')`), so the file is the root order the spec names and V8's
// ASCII fast path of localeCompare agrees with ICU proper.
//
// Output: one JSON object. Its first line holds the header (node, ICU and CLDR versions and
// `Intl.Collator().resolvedOptions()`), then one `[a, b, sign]` record per line.
'use strict';

const SEED = 0x51c0_11a7;
const TARGET_PAIRS = 12000;

const { mulberry32 } = require('./prng');

const random = mulberry32(SEED);
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1)); // inclusive bounds
const pick = (xs) => xs[int(0, xs.length - 1)];
const chance = (p) => random() < p;

const range = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, i) => String.fromCharCode(lo + i));
const IGNORABLE = [...range(0x00, 0x08), ...range(0x0e, 0x1f), '\x7f'];
const WHITESPACE = ['\t', '\n', '\v', '\f', '\r', ' '];
const PUNCTUATION = [...'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'];
const DIGITS = range(0x30, 0x39);
const LOWER = range(0x61, 0x7a);
const UPPER = range(0x41, 0x5a);
const LETTERS = [...LOWER, ...UPPER];
const ALNUM = [...LETTERS, ...DIGITS];
const PRINTABLE = [...PUNCTUATION, ' ', ...ALNUM];
const ALL_ASCII = range(0x00, 0x7f);
const NON_LETTERS = [...WHITESPACE, ...PUNCTUATION, ...DIGITS]; // every non-ignorable non-letter
// A small alphabet of near-ties: case partners, neighbours in the primary order, an ignorable.
const NEAR = ['a', 'A', 'b', 'B', '-', '_', ' ', '.', '0', '1', '\x01', 'z', 'Z', ':'];

const randomString = (alphabet, minLength, maxLength) => {
  let s = '';
  for (let n = int(minLength, maxLength); n > 0; n--) s += pick(alphabet);
  return s;
};
const flipCase = (c) => (c >= 'a' && c <= 'z' ? c.toUpperCase() : c >= 'A' && c <= 'Z' ? c.toLowerCase() : c);
const randomCaseFlips = (s) => [...s].map((c) => (chance(0.4) ? flipCase(c) : c)).join('');
const insertAt = (s, i, t) => s.slice(0, i) + t + s.slice(i);
const replaceAt = (s, i, c) => s.slice(0, i) + c + s.slice(i + 1);
const sprinkleIgnorables = (s, count) => {
  for (let k = 0; k < count; k++) s = insertAt(s, int(0, s.length), pick(IGNORABLE));
  return s;
};
const firstLetterIndex = (s) => [...s].findIndex((c) => LETTERS.includes(c));

// A realistic string and a "neighbour" of it: one edit that keeps the shape, so pairs share prefixes.
function mutate(s, alphabet) {
  if (s.length === 0) return pick(alphabet);
  const i = int(0, s.length - 1);
  switch (int(0, 6)) {
    case 0: return replaceAt(s, i, pick(alphabet));
    case 1: return replaceAt(s, i, flipCase(s[i]));
    case 2: return s + randomString(alphabet, 1, 3);
    case 3: return s.slice(0, i);
    case 4: return randomCaseFlips(s);
    case 5: return insertAt(s, i, pick(alphabet));
    default: return s.slice(0, i) + s.slice(i + 1);
  }
}

const ENV_FIRST = [...LETTERS, '_'];
const ENV_REST = [...ALNUM, '_'];
const envName = () => {
  const words = ['PATH', 'HOME', 'NODE_ENV', 'API_KEY', 'api_key', 'Api_Key', 'DATABASE_URL', 'LOG_LEVEL',
    'TZ', 'LANG', 'QL_TOKEN', 'token', 'Token_2', '_PRIVATE', '__proto', 'X1', 'x_1', 'X_1'];
  if (chance(0.4)) return pick(words) + (chance(0.5) ? randomString(ENV_REST, 0, 4) : '');
  return pick(ENV_FIRST) + randomString(ENV_REST, 0, chance(0.8) ? 12 : 40);
};

const NAME_CHARS = [...LOWER, ...DIGITS, '-', '.', '_'];
const TASK_CHARS = [...LOWER, ...UPPER, ...DIGITS, '-', '.', '_'];
const packageName = () => {
  const base = pick(LOWER) + randomString(NAME_CHARS, 0, 14);
  return chance(0.3) ? `@${pick(LOWER)}${randomString(NAME_CHARS, 0, 8)}/${base}` : base;
};
const taskId = () => pick([...LOWER, ...DIGITS]) + randomString(TASK_CHARS, 0, 20);
const runtimeTaskId = () => `pkg:${packageName()}:${taskId()}`;

const LABEL_FIRST = ALNUM;
const LABEL_REST = [...ALNUM, '.', '_', '/', '-'];
const labelKey = () => {
  const words = ['app', 'App', 'region', 'zone', 'tier', 'kubernetes.io/arch', 'example.com/team', 'gpu',
    'GPU', 'node-role', 'node_role', 'node.role', 'node/role', 'v1', 'V1', '0', '1', '10', '9a'];
  if (chance(0.4)) return pick(words) + (chance(0.5) ? randomString(LABEL_REST, 0, 4) : '');
  return pick(LABEL_FIRST) + randomString(LABEL_REST, 0, chance(0.8) ? 16 : 60);
};

// ---------------------------------------------------------------------------------------------------

const defaultLocale = new Intl.Collator().resolvedOptions().locale;
if (defaultLocale !== 'en-US') {
  process.stderr.write(`default locale is ${defaultLocale}, not en-US: run with LC_ALL=C\n`);
  process.exit(2);
}
const root = new Intl.Collator('und');

const pairs = [];
const seen = new Set();
function add(a, b) {
  if (chance(0.5)) [a, b] = [b, a];
  const key = JSON.stringify([a, b]);
  if (seen.has(key)) return;
  seen.add(key);
  const sign = Math.sign(a.localeCompare(b));
  const rootSign = Math.sign(root.compare(a, b));
  if (sign !== rootSign) {
    process.stderr.write(`localeCompare and ICU root disagree on ${key}: ${sign} vs ${rootSign}\n`);
    process.exit(1);
  }
  pairs.push([a, b, sign]);
}
const repeat = (n, f) => { for (let k = 0; k < n; k++) f(); };

// 1. Single characters: every unordered pair of non-letters (the whole punctuation order), each letter
//    against its case partner, its neighbours and the digit/punctuation boundary, every ignorable.
for (let i = 0; i < NON_LETTERS.length; i++) {
  for (let j = i + 1; j < NON_LETTERS.length; j++) add(NON_LETTERS[i], NON_LETTERS[j]);
}
for (let i = 0; i < LOWER.length; i++) {
  const [l, u] = [LOWER[i], UPPER[i]];
  add(l, u);
  if (i + 1 < LOWER.length) { add(u, LOWER[i + 1]); add(l, UPPER[i + 1]); }
  add(u, '9'); add(l, pick(NON_LETTERS)); add(u, pick(LETTERS));
}
for (const c of IGNORABLE) { add(c, ''); add(c, pick(IGNORABLE)); add(c, pick(PRINTABLE)); add(c + 'a', 'a'); }

// 2. Random strings: over all of ASCII, over printable ASCII, and over a near-tie alphabet.
repeat(1500, () => add(randomString(ALL_ASCII, 0, 10), randomString(ALL_ASCII, 0, 10)));
repeat(700, () => add(randomString(PRINTABLE, 0, 8), randomString(PRINTABLE, 0, 8)));
repeat(900, () => add(randomString(NEAR, 0, 6), randomString(NEAR, 0, 6)));

// 3. Equal except for case; a case difference before or after a primary difference.
repeat(700, () => { const s = randomString([...ALNUM, ...PUNCTUATION], 1, 14); add(s, randomCaseFlips(s)); });
repeat(500, () => {
  const s = randomString([...LETTERS, ...DIGITS, '-', '_'], 2, 12);
  const i = firstLetterIndex(s);
  if (i < 0) return;
  let t = replaceAt(s, i, flipCase(s[i]));
  const j = int(0, s.length - 1);
  if (j !== i) t = replaceAt(t, j, pick(ALNUM));
  add(s, t);
});

// 4. Equal except for ignorable controls (and then a case or primary difference besides).
repeat(600, () => {
  const s = randomString(PRINTABLE, 0, 12);
  let t = sprinkleIgnorables(s, int(1, 3));
  if (chance(0.3)) t = randomCaseFlips(t);
  else if (chance(0.2) && t.length) t = replaceAt(t, int(0, t.length - 1), pick(PRINTABLE));
  add(chance(0.3) ? sprinkleIgnorables(s, 1) : s, t);
});

// 5. Prefixes of each other (also with ignorables or a case change on the longer one).
repeat(600, () => {
  const s = randomString(chance(0.5) ? PRINTABLE : [...ALNUM, ...WHITESPACE], 1, 20);
  let t = s.slice(0, int(0, s.length - 1));
  if (chance(0.2)) t = sprinkleIgnorables(t, 1);
  add(chance(0.2) ? randomCaseFlips(s) : s, t);
});

// 6. Long common prefixes (40..100 characters) and then a difference of every kind.
repeat(600, () => {
  const prefix = randomString(chance(0.5) ? PRINTABLE : ALL_ASCII, 40, 100);
  const tail = randomString(PRINTABLE, 0, 4);
  const other = pick([
    () => randomString(PRINTABLE, 0, 4),
    () => randomCaseFlips(tail),
    () => sprinkleIgnorables(tail, 1),
    () => tail.slice(0, -1),
    () => '',
  ])();
  add(prefix + tail, prefix + other);
});

// 7. Empty strings: against each other, against ignorables only, whitespace only, anything.
add('', '');
repeat(300, () => add('', pick([
  () => randomString(IGNORABLE, 1, 4),
  () => randomString(WHITESPACE, 1, 3),
  () => randomString(ALL_ASCII, 1, 6),
  () => pick(PRINTABLE),
])()));

// 8. Whitespace-heavy strings (TAB < LF < VT < FF < CR < space, then `_`).
const SPACY = [...WHITESPACE, '_', 'a', 'A'];
repeat(400, () => add(randomString(SPACY, 0, 6), randomString(SPACY, 0, 6)));

// 9. Realistic shapes: environment variable names, runtime Task ids and label keys, each against
//    another of its kind or a one-edit neighbour of itself.
repeat(1000, () => { const s = envName(); add(s, chance(0.6) ? mutate(s, ENV_REST) : envName()); });
repeat(1000, () => {
  const s = runtimeTaskId();
  add(s, chance(0.6) ? mutate(s, [...TASK_CHARS, ':']) : runtimeTaskId());
});
repeat(1000, () => { const s = labelKey(); add(s, chance(0.6) ? mutate(s, LABEL_REST) : labelKey()); });

// 10. Top up to the target with random pairs of realistic and arbitrary strings.
while (pairs.length < TARGET_PAIRS) {
  const makers = [envName, runtimeTaskId, labelKey, () => randomString(ALL_ASCII, 0, 12)];
  add(pick(makers)(), pick(makers)());
}

const header = {
  description: 'sign of a.localeCompare(b) (no arguments) for each record [a, b, sign]; the ql3 collation of ' +
    'task-attempts.md §3A; every sign also equals new Intl.Collator("und").compare(a, b)',
  generator: 'tests/vectors/generate_collation_vectors.js',
  seed: SEED,
  count: pairs.length,
  node: process.version,
  icu: process.versions.icu,
  unicode: process.versions.unicode,
  cldr: process.versions.cldr,
  collator: Intl.Collator().resolvedOptions(),
};
const lines = pairs.map((p) => JSON.stringify(p));
process.stdout.write(`{"header":${JSON.stringify(header)},\n"pairs":[\n${lines.join(',\n')}\n]}\n`);
