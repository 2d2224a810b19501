// node download.mjs CACHE_DIR HUB_URL ORG/NAME: @huggingface/hub's snapshotDownload of the repo's
// main into CACHE_DIR from HUB_URL (tests/hub: the fake hub), so a test can hold kiln's cache to
// the layout the hub's own client writes. Prints the snapshot folder.
import { snapshotDownload } from "@huggingface/hub";

console.debug = () => {};  // its "Downloading ..." lines
const [cacheDir, hubUrl, name] = process.argv.slice(2);
console.log(await snapshotDownload({ repo: { type: "model", name }, cacheDir, hubUrl }));
