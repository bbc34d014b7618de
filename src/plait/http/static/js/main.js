// plait dashboard: plain JavaScript modules over the JSON API (no libraries, no build step,
// works offline). This one starts the page: the sign-in form, who is signed in, and the
// page's own module (the server names the page in <body data-page>).

import { signIn, signOut, whoAmI } from "./api.js";
import { runPage } from "./run.js";
import { runsPage } from "./runs.js";
import { schedulesPage } from "./schedules.js";

// Earlier versions kept a token here: it must not outlive this version.
try {
  localStorage.removeItem("plait.token");
} catch (_) {
  /* storage may be off */
}

document.getElementById("signin-form").addEventListener("submit", signIn);
document.getElementById("signout").addEventListener("click", signOut);
// a page starts once this resolves to who is signed in (null: nobody, and the page asks
// for a token)
const signedIn = whoAmI();
signedIn.then((me) => {
  if (!me) return;
  if (document.body.dataset.page === "runs") runsPage();
  if (document.body.dataset.page === "run") runPage();
  if (document.body.dataset.page === "schedules") schedulesPage();
});
