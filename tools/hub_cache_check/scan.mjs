// node scan.mjs CACHE_DIR: @huggingface/hub's scanCacheDir over CACHE_DIR, printed as JSON (repo
// ids, revisions with their refs, each file's name and blob size, and the scan's warnings).
import { scanCacheDir } from "@huggingface/hub";

const info = await scanCacheDir(process.argv[2]);
console.log(JSON.stringify({
  warnings: info.warnings.map(String),
  repos: info.repos.map((r) => ({
    id: r.id.name,
    type: r.id.type,
    filesCount: r.filesCount,
    revisions: r.revisions.map((v) => ({
      commit: v.commitOid,
      refs: v.refs,
      files: Object.fromEntries(v.files.map((f) => [f.path.split("/").pop(), f.blob.size])),
    })),
  })),
}));
