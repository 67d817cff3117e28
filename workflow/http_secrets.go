package workflow

import (
	"slices"
)

// Secrets: a step's header values and body may hold {{secret.NAME}}. The
// values are not in the job file: `tempest submit` takes them from its
// --secret flags or its environment and sends them beside the file, and
// ParseParams copies the ones the steps use into HTTPParams.Secrets. The
// templates keep the reference, so every message about a field (at submit,
// or a failed request's log line on a worker) shows {{secret.NAME}} and
// never the value; the worker binds the values into the templates once per
// run (bindSecrets). Status, results and logs carry no params, so a secret
// goes to the target and nowhere else. A URL may not hold one: URLs are in
// error messages and in every target's access log.

// Limits on secrets, which arrive over the network like any params.
const (
	maxSecrets     = 64
	maxSecretValue = 64 << 10
)

// readSecrets copies the values of the secrets st renders into secrets
// (made when first needed), and reports at st's keys each one the
// submitter gave no value for.
func readSecrets(sf *Fields, st *HTTPStep, secrets map[string]string) map[string]string {
	need := func(key, src string) {
		t, err := parseTemplate(src)
		if err != nil {
			return // Validate reports it
		}
		for _, name := range t.secretNames() {
			if _, have := secrets[name]; have {
				continue
			}
			v, ok := sf.Secret(name)
			if !ok {
				sf.Errorf(key, "{{secret.%s}}: no value was given; set %s in the environment of tempest submit or pass --secret %s=VALUE",
					name, name, name)
				continue
			}
			if secrets == nil {
				secrets = map[string]string{}
			}
			secrets[name] = v
		}
	}
	need("body", st.Body)
	keys := make([]string, 0, len(st.Headers))
	for k := range st.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		need("headers", st.Headers[k])
	}
	return secrets
}

// validateSecrets checks where steps use secrets and that each has a
// value that fits there. No message shows a value.
func (p *HTTPParams) validateSecrets(errs *FieldErrors) {
	if len(p.Secrets) > maxSecrets {
		errs.add("steps", "use more than %d secrets (%d)", maxSecrets, len(p.Secrets))
	}
	for name, v := range p.Secrets {
		if !isSecretName(name) {
			errs.add("steps", "secret name %q is not letters, digits and _", truncate(name, 40))
		}
		if len(v) > maxSecretValue {
			errs.add("steps", "secret %s is %d bytes, more than %d", name, len(v), maxSecretValue)
		}
	}
	check := func(path, src string, header bool) {
		t, err := parseTemplate(src)
		if err != nil {
			return // the step's own check reports it
		}
		for _, name := range t.secretNames() {
			v, ok := p.Secrets[name]
			switch {
			case !ok:
				errs.add(path, "{{secret.%s}}: no value was given", name)
			case header && (len(v) > maxHeaderLen || !validHeaderValue(v)):
				errs.add(path, "{{secret.%s}}: the value is not a valid header value (control characters, or more than %d bytes)", name, maxHeaderLen)
			}
		}
	}
	p.eachStep(func(path string, st *HTTPStep) {
		if t, err := parseTemplate(st.URL); err == nil && len(t.secretNames()) > 0 {
			errs.add(JoinPath(path, "url"), "{{secret.%s}} cannot be used in a url, which targets log and error messages show; send it in a header or the body",
				t.secretNames()[0])
		}
		check(JoinPath(path, "body"), st.Body, false)
		for k, v := range st.Headers {
			check(JoinPath(JoinPath(path, "headers"), k), v, true)
		}
	})
}

// eachStep calls fn with every step, setup steps first, and its job-file
// path.
func (p *HTTPParams) eachStep(fn func(path string, st *HTTPStep)) {
	for i := range p.Setup {
		fn(IndexPath("setup", i), &p.Setup[i])
	}
	for i := range p.Steps {
		fn(IndexPath("steps", i), &p.Steps[i])
	}
}
