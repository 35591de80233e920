// The OpenID provider of the single sign-on tests: panva's oidc-provider (npm), configured
// here and nothing else. tests/sso/conftest.py starts it with
//
//   node provider.mjs <config.json>
//
// where the config names the node_modules folder tests/npm.py installed, the port, the
// issuer, one client (id, secret, redirect URIs of the
// live test server) and the accounts file. Accounts are read from that JSON file at every
// look-up ({"<sub>": {"preferred_username": ..., "email": ..., "groups": [...]}}), so a test
// can change a person's groups between two sign-ins. The development interactions of
// oidc-provider serve the login form (any password; the login is the account's sub) and the
// consent form; "abort" on them answers the client with error=access_denied.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
// The package lives in tests/npm.py's cache, not beside this file.
const entry = createRequire(join(config.node_modules, 'x.js')).resolve('oidc-provider');
const { default: Provider } = await import(pathToFileURL(entry).href);

function accounts() {
  return JSON.parse(readFileSync(config.accounts, 'utf8'));
}

const provider = new Provider(config.issuer, {
  clients: [
    {
      client_id: config.client_id,
      client_secret: config.client_secret,
      redirect_uris: config.redirect_uris,
      post_logout_redirect_uris: config.post_logout_redirect_uris || [],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: config.token_endpoint_auth_method || 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    // The groups claim comes with the profile scope, as Keycloak's group mapper adds it.
    profile: ['name', 'given_name', 'family_name', 'preferred_username', 'groups'],
  },
  cookies: { keys: ['sso-test-provider-cookie-key'] },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, sub) {
    const person = accounts()[sub];
    if (!person) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, ...accounts()[sub] };
      },
    };
  },
});

provider.on('server_error', (ctx, err) => console.error('server_error', err));

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${config.issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
