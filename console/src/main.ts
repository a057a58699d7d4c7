// Kiln Studio's web console: sign in as a user (name and password) or with
// a token, then jobs, the store, models and services, all through the public
// REST API.
import "./style.css";
import { ApiError, call, get, setToken, token, type Scope } from "./api";
import { h, mount, errorBox } from "./dom";
import { jobsPage, jobPage } from "./jobs";
import { storePage } from "./store";
import { modelsPage, modelPage } from "./models";
import { servicesPage, servicePage } from "./services";
import { notebooksPage } from "./notebooks";

export interface Session {
  name: string;
  scope: Scope;
  canWrite: boolean;
  roles?: Record<string, string>;  // a user's role in each project
}

const app = document.getElementById("app")!;
const bar = document.getElementById("bar")!;
let session: Session | null = null;
let leaving: (() => void) | null = null;  // what the page shown last must stop (a log follow, a timer)

function signIn(message = "") {
  const user = h("input", { type: "text", id: "user", autocomplete: "username", size: 24 });
  const password = h("input", { type: "password", id: "password", autocomplete: "current-password", size: 24 });
  const input = h("input", { type: "password", id: "token", placeholder: "kst_...", autocomplete: "off", size: 48 });
  const form = h("form", { class: "signin", id: "signin" },
    h("h1", {}, "Kiln Studio"),
    h("label", { for: "user" }, "User"), user,
    h("label", { for: "password" }, "Password"), password,
    h("label", { for: "token" }, "or an API token"), input,
    h("button", { type: "submit" }, "Sign in"),
    message ? h("p", { class: "error", role: "alert" }, message) : null,
    h("p", { class: "hint" }, "Users come from ", h("code", {}, "kiln studio user create"), "; tokens from ",
      h("code", {}, "kiln studio token create --scope read|write|admin"), "."));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (user.value.trim()) {
      try {
        const reply = await call<{ token: string }>("POST", "/login", { user: user.value.trim(), password: password.value });
        setToken(reply.token);
      } catch (err) {
        return signIn(err instanceof ApiError ? err.message : String(err));
      }
    } else {
      setToken(input.value.trim());
    }
    await start();
  });
  bar.replaceChildren();
  mount(app, form);
  user.focus();
}

function navigation(s: Session) {
  const link = (hash: string, text: string) => h("a", { href: hash, "data-nav": text.toLowerCase() }, text);
  bar.replaceChildren(
    h("strong", {}, "Kiln Studio"),
    h("nav", {}, link("#/jobs", "Jobs"), link("#/store", "Store"), link("#/models", "Models"), link("#/services", "Services"),
      link("#/notebooks", "Notebooks")),
    h("span", { class: "who", id: "who" }, s.roles
      ? `${s.name} (${Object.entries(s.roles).map(([p, r]) => `${r} in ${p}`).join(", ") || "no projects"})`
      : `${s.name} (${s.scope})`),
    h("button", { id: "signout", onclick: () => { setToken(null); session = null; signIn(); } }, "Sign out"));
}

async function route() {
  if (!session) return;
  leaving?.();
  leaving = null;
  const parts = (location.hash.replace(/^#\/?/, "") || "jobs").split("/").map(decodeURIComponent);
  for (const a of bar.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === `#/${parts[0]}`);
  const page = h("section", { class: "page" });
  mount(app, page);
  try {
    if (parts[0] === "jobs" && parts[1]) leaving = await jobPage(page, session, Number(parts[1]));
    else if (parts[0] === "jobs") leaving = await jobsPage(page, session);
    else if (parts[0] === "store") await storePage(page, session, parts[1] ?? "", parts.slice(2).join("/"));
    else if (parts[0] === "models" && parts[1]) await modelPage(page, session, parts[1]);
    else if (parts[0] === "models") await modelsPage(page);
    else if (parts[0] === "services" && parts[1]) leaving = await servicePage(page, session, parts[1]);
    else if (parts[0] === "services") await servicesPage(page);
    else if (parts[0] === "notebooks") await notebooksPage(page);
    else page.append(h("p", {}, "No such page."));
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return signIn("The token is unknown or revoked.");
    page.append(errorBox(e));
  }
}

async function start() {
  if (!token()) return signIn();
  try {
    const me = await get<{ name: string; scope: Scope; user?: string; projects?: Record<string, string> }>("/whoami");
    // A user's token writes where the user is a developer or an admin.
    const roles = Object.values(me.projects ?? {});
    session = me.user
      ? { name: me.user, scope: me.scope, canWrite: roles.some((r) => r !== "viewer"), roles: me.projects }
      : { name: me.name, scope: me.scope, canWrite: me.scope !== "read" };
  } catch (e) {
    setToken(null);
    return signIn(e instanceof ApiError && e.status === 401 ? "That token is unknown or revoked." : String(e));
  }
  navigation(session);
  await route();
}

window.addEventListener("hashchange", route);
start();
