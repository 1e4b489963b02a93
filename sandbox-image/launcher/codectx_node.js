// The JavaScript and TypeScript side of a code context (codectx_lang.go):
// cells come from fd 3 as JSON lines {nonce, code} and each is answered on
// fd 4 with {nonce, text?, error?}, on a line of its own.
//
// A cell runs as the Node REPL runs a line, on the global context: its
// top-level const, let, functions and classes stay for the next cell,
// require and import() work, top-level await is awaited (the REPL's own
// rewrite, internal/repl/await, hence node --expose-internals), and the
// value is shown as the REPL shows it (util.inspect). SIGINT, the
// launcher's interrupt at a cell's timeout, stops a running loop
// (breakOnSigint) or gives up on an awaited promise; the context lives
// on. TypeScript cells are transpiled first with the image's typescript
// module (Debian's node-typescript): types are dropped, not checked.
'use strict';
// All in a function: what the runner declares is not the cells' global scope.
(() => {
const fs = require('fs');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { processTopLevelAwait } = require('internal/repl/await');

const lang = process.argv[process.argv.length - 1];
const ts = lang === 'typescript' ? require('typescript') : null;
const show = (v) => util.inspect(v, { showProxy: true });
const dynamicImport = (s) => import(s);

let pending = null; // the nonce of the cell running, or awaited
function answer(out) {
  fs.writeSync(4, '\n' + JSON.stringify(out) + '\n');
}

// A stack's frames of the cell, without the runner's under them.
function cellStack(stack) {
  return String(stack || '').split('\n').filter((l) => !/^\s+at /.test(l) || l.includes('<cell>')).join('\n');
}

function errorOf(e) {
  if (e instanceof Error) {
    return { name: String(e.name), value: String(e.message), traceback: cellStack(e.stack) };
  }
  let v;
  try { v = show(e); } catch { v = String(e); }
  return { name: 'Uncaught', value: v, traceback: '' };
}

// What a cell left running (a timer, a promise) that throws later is
// printed, as the REPL prints it, and the context lives on.
process.on('uncaughtException', (e) => { process.stderr.write('Uncaught ' + (e && e.stack || show(e)) + '\n'); });
process.on('unhandledRejection', (e) => { process.stderr.write('Uncaught (in promise) ' + (e && e.stack || show(e)) + '\n'); });

// A SIGINT between cells is nothing; one while a cell awaits answers it.
let giveUp = null;
process.on('SIGINT', () => { if (giveUp) giveUp(); });

function transpile(code) {
  const out = ts.transpileModule(code, {
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.CommonJS,
      esModuleInterop: true, removeComments: false, sourceMap: false,
    },
  });
  const bad = (out.diagnostics || []).find((d) => d.category === ts.DiagnosticCategory.Error);
  if (bad) {
    const e = new SyntaxError(ts.flattenDiagnosticMessageText(bad.messageText, '\n'));
    let at = '<cell>';
    if (bad.file && bad.start !== undefined) {
      const p = bad.file.getLineAndCharacterOfPosition(bad.start);
      at += ':' + (p.line + 1) + ':' + (p.character + 1);
    }
    e.stack = 'SyntaxError: ' + e.message + '\n    at ' + at;
    throw e;
  }
  // A module's prologue (a cell with import or export) refers to exports.
  return out.outputText.replace(/^"use strict";\s*/, '');
}

function run(m) {
  const nonce = String(m.nonce);
  pending = nonce;
  const done = (err, v) => {
    if (pending !== nonce) return;
    pending = null;
    giveUp = null;
    const out = { nonce };
    if (err !== undefined) {
      out.error = errorOf(err);
    } else if (v !== undefined) {
      try { out.text = show(v); } catch (e) { out.error = errorOf(e); }
    }
    answer(out);
  };
  let code = String(m.code);
  let awaited = false;
  try {
    if (ts) code = transpile(code);
    // An object literal, not a block, as the REPL reads it.
    if (/^\s*{/.test(code) && /}\s*;?\s*$/.test(code)) code = '(' + code.replace(/;\s*$/, '') + ')';
    if (code.includes('await')) {
      const wrapped = processTopLevelAwait(code);
      if (wrapped !== null) {
        code = wrapped;
        awaited = true;
      }
    }
    const script = new vm.Script(code, { filename: '<cell>', importModuleDynamically: dynamicImport });
    const v = script.runInThisContext({ displayErrors: false, breakOnSigint: true });
    if (!awaited) {
      done(undefined, v);
      return;
    }
    giveUp = () => done(new Error('Script execution was interrupted by SIGINT'));
    Promise.resolve(v).then((res) => done(undefined, res && res.value), (e) => done(e === undefined ? null : e));
  } catch (e) {
    done(e === undefined ? null : e);
  }
}

const rl = readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }), crlfDelay: Infinity });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m && typeof m.nonce === 'string') run(m);
});
rl.on('close', () => process.exit(0));
})();
