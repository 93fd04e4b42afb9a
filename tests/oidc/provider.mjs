// Real OpenID Providers on loopback for tests/oidc.rs: panva's oidc-provider (OpenID Certified),
// one instance per issuer, each on its own 127.0.0.1 port, with its development login and consent
// pages (any login name; the claims are the test's, see `account` below).
//
//   node provider.mjs '<spec as JSON>'
//
// spec: {"issuers": [{"name", "alg": "RS256"|"ES256", "clients": [{"client_id", "client_secret",
//        "auth": "client_secret_basic"|"client_secret_post", "redirect_uris": [...],
//        "id_token_alg": the client's ID token algorithm, when not the issuer's "alg"}],
//        "id_token_ttl": seconds, "slow_token_ms": ms, "foreign_keys": bool, "down": bool}]}
//
// Prints one line, `ready {"<name>": "<issuer URL>", ...}`, then answers commands on stdin, one
// JSON object a line, each with one line on stdout (`ok <JSON>` or `error <text>`):
//   {"cmd": "account", "id": "<login>", "claims": {...}}   what findAccount returns for a login
//   {"cmd": "rotate", "issuer": "<name>"}                  a new signing key; the old one is still
//                                                           published, as a real rotation does
//   {"cmd": "up", "issuer": "<name>"}                      an issuer started `down` (503) answers
//   {"cmd": "wrong_audience", "issuer": "<name>", "from": "<client>", "to": "<client>"}
//        the issuer misbehaves: a sign-in of client `from` is done as client `to` (authorization
//        request and token request), so the ID token's aud is `to`
//   {"cmd": "stats"}                                        requests seen per issuer and path
// It exits when stdin closes, so it never outlives the test that started it.
//
// The misbehaviours a test needs are the real provider's own work, configured or wrapped:
// `id_token_ttl` 1 with `slow_token_ms` answers the token request after the ID token has expired;
// `foreign_keys` publishes, under the real key ids, keys other than those that sign; and
// `wrong_audience` rewrites the client of a request before the provider sees it.

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';

import Provider from 'oidc-provider';

// stdout carries the answers to the test; the provider's own notices go to stderr with the rest.
console.log = console.error;
console.info = console.error;

const spec = JSON.parse(process.argv[2]);
const accounts = new Map();
const stats = {};

function newKey(alg) {
  const options = alg.startsWith('ES')
    ? ['ec', { namedCurve: 'P-256' }]
    : ['rsa', { modulusLength: 2048 }];
  const { privateKey } = generateKeyPairSync(...options);
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg, use: 'sig' };
}

function publicPart(jwk) {
  const { d, p, q, dp, dq, qi, ...pub } = jwk;
  return pub;
}

function configuration(issuer, keys) {
  return {
    clients: issuer.clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      redirect_uris: c.redirect_uris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: c.auth ?? 'client_secret_basic',
      id_token_signed_response_alg: c.id_token_alg ?? issuer.alg,
    })),
    jwks: { keys },
    async findAccount(ctx, id) {
      return { accountId: id, claims: async () => ({ sub: id, ...accounts.get(id) }) };
    },
    claims: {
      openid: ['sub'],
      // xms_edov: what Entra ID sends instead of email_verified (CONSOLED_OIDC_N_EMAIL_VERIFIED_CLAIM).
      email: ['email', 'email_verified', 'xms_edov'],
      profile: ['name', 'preferred_username'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
    pkce: { required: () => true },
    ttl: {
      IdToken: issuer.id_token_ttl ?? 3600,
      AccessToken: 600,
      AuthorizationCode: 60,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
    },
    cookies: { keys: ['consoled-test-cookie-key'] },
    // HS256 too, so that a client registered for it gets MAC-signed ID tokens (which consoled
    // must refuse).
    enabledJWA: { idTokenSigningAlgValues: ['RS256', 'PS256', 'ES256', 'EdDSA', 'HS256'] },
    features: { devInteractions: { enabled: true } },
  };
}

/// Wraps one issuer: counts requests, misbehaves when told, and lets a rotation swap the
/// provider instance (new keys) behind the same port and issuer.
function makeIssuer(issuerSpec, url) {
  const state = {
    spec: issuerSpec,
    url,
    keys: [newKey(issuerSpec.alg)],
    down: Boolean(issuerSpec.down),
    wrongAudience: null,
    provider: null,
  };
  stats[issuerSpec.name] = {};
  state.build = () => {
    const provider = new Provider(url, configuration(issuerSpec, state.keys));
    provider.use(async (ctx, next) => misbehave(state, ctx, next));
    state.provider = provider;
    state.handler = provider.callback();
  };
  state.build();
  return state;
}

async function misbehave(state, ctx, next) {
  const counts = stats[state.spec.name];
  counts[ctx.path] = (counts[ctx.path] ?? 0) + 1;
  if (state.down) {
    ctx.status = 503;
    ctx.body = 'down';
    return;
  }
  if (ctx.path === '/jwks' && state.spec.foreign_keys) {
    // The key ids of the keys that sign, the material of others.
    ctx.type = 'json';
    ctx.body = { keys: state.keys.map((k) => ({ ...publicPart(newKey(k.alg)), kid: k.kid })) };
    return;
  }
  const swap = state.wrongAudience;
  if (swap && ctx.path === '/auth' && ctx.query.client_id === swap.from) {
    ctx.query = { ...ctx.query, client_id: swap.to };
  }
  if (swap && ctx.path === '/token') {
    const to = state.spec.clients.find((c) => c.client_id === swap.to);
    const basic = Buffer.from(`${to.client_id}:${to.client_secret}`).toString('base64');
    ctx.req.headers.authorization = `Basic ${basic}`;
  }
  await next();
  if (ctx.path === '/token' && state.spec.slow_token_ms) {
    await new Promise((resolve) => { setTimeout(resolve, state.spec.slow_token_ms); });
  }
}

async function listen() {
  const server = createServer();
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  return server;
}

const issuers = {};
for (const issuerSpec of spec.issuers) {
  const server = await listen();
  const url = `http://127.0.0.1:${server.address().port}`;
  const state = makeIssuer(issuerSpec, url);
  server.on('request', (req, res) => state.handler(req, res));
  issuers[issuerSpec.name] = state;
}

const commands = {
  account({ id, claims }) {
    accounts.set(id, claims);
    return {};
  },
  rotate({ issuer }) {
    const state = issuers[issuer];
    state.keys = [newKey(state.spec.alg), ...state.keys];
    state.build();
    return { kid: state.keys[0].kid };
  },
  up({ issuer }) {
    issuers[issuer].down = false;
    return {};
  },
  wrong_audience({ issuer, from, to }) {
    issuers[issuer].wrongAudience = from ? { from, to } : null;
    return {};
  },
  stats() {
    return stats;
  },
};

const urls = Object.fromEntries(Object.entries(issuers).map(([name, s]) => [name, s.url]));
process.stdout.write(`ready ${JSON.stringify(urls)}\n`);

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  try {
    const command = JSON.parse(line);
    const run = commands[command.cmd];
    if (!run) throw new Error(`unknown command ${command.cmd}`);
    process.stdout.write(`ok ${JSON.stringify(run(command))}\n`);
  } catch (e) {
    process.stdout.write(`error ${String(e.message).replace(/\n/g, ' ')}\n`);
  }
});
lines.on('close', () => process.exit(0));
