//! What a command prints: text, or one JSON object with `--json`; and which
//! replies count as answers.

use std::net::SocketAddr;

use serde_json::{json, Value};
use svcroute_stack::wire::slp::{
    AttrList, AttrValue, Body, DaAdvert, ErrorCode, ScopeList, ServiceType, Signed,
};

use super::auth::verified;
use super::clock::rfc3339;
use super::ctx::{Ctx, Outcome};
use super::fail::{code_name, code_text, rank, Fail};
use super::net::{NetError, Reply};

/// The successful replies of a query; failures are warnings while at least
/// one agent answered with 0 (RFC 2608 §12.3: use another DA), else the
/// command fails.
pub(super) fn successes<'a>(outcomes: &'a [Outcome], what: &str) -> Result<Vec<&'a Reply>, Fail> {
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for o in outcomes {
        failures.push(match &o.result {
            Ok(r) => match r.msg.body().error() {
                None | Some(ErrorCode::Ok) => {
                    ok.push(r);
                    continue;
                }
                Some(code) => Fail::Refused(format!(
                    "{} answered the {what} with {}",
                    o.agent,
                    code_text(code)
                )),
            },
            Err(NetError::NoReply(s)) => Fail::NoReply(s.clone()),
            Err(NetError::Other(e)) => Fail::Other(format!("{e:#}")),
        });
    }
    if !ok.is_empty() {
        for f in failures {
            eprintln!("svcroute: slp: warning: {f}");
        }
        return Ok(ok);
    }
    // The worst failure decides the exit status; the others are printed here.
    let Some(worst) = (0..failures.len()).max_by_key(|&i| rank(&failures[i])) else {
        return Err(Fail::NoReply(format!("no DA or SA answered the {what}")));
    };
    let worst = failures.remove(worst);
    for f in failures {
        eprintln!("svcroute: slp: {f}");
    }
    Err(worst)
}

pub(super) fn transport(r: &Reply) -> &'static str {
    if r.tcp {
        "tcp"
    } else {
        "udp"
    }
}

pub(super) fn outcome_json(o: &Outcome) -> Value {
    result_json(o.agent, &o.result)
}

pub(super) fn result_json(agent: SocketAddr, result: &Result<Reply, NetError>) -> Value {
    match result {
        Ok(r) => {
            let code = r.msg.body().error().unwrap_or_default();
            json!({
                "agent": r.from.to_string(),
                "transport": transport(r),
                "overflow": r.overflow,
                "truncated": r.truncated,
                "error_code": u16::from(code),
                "error": code_name(code),
            })
        }
        Err(e) => json!({
            "agent": agent.to_string(),
            "error_code": Value::Null,
            "error": match e { NetError::NoReply(_) => "NO_REPLY", NetError::Other(_) => "FAILED" },
            "message": e.to_string(),
        }),
    }
}

pub(super) fn scope_names(s: &ScopeList) -> Vec<String> {
    s.scopes().iter().map(|s| s.as_raw().to_owned()).collect()
}

pub(super) fn value_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Integer(i) => json!(i),
        AttrValue::Boolean(b) => json!(b),
        AttrValue::String(s) => json!(s),
        AttrValue::Opaque(o) => {
            json!({ "opaque": o.iter().map(|b| format!("{b:02x}")).collect::<String>() })
        }
    }
}

pub(super) fn attrs_json(a: &AttrList) -> Value {
    Value::Array(
        a.attributes()
            .iter()
            .map(|a| {
                json!({
                    "tag": a.tag(),
                    "values": a.values().iter().map(value_json).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

pub(super) fn find_output(ctx: &Ctx, st: &ServiceType, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, &format!("SrvRqst for {st}"));
    let mut entries: Vec<(String, u16, usize, SocketAddr, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            let found: Vec<(String, u16, usize, Option<bool>)> = match r.msg.body() {
                Body::SrvRply(s) => s
                    .entries
                    .iter()
                    .map(|e| {
                        let v = verified(check.as_ref(), &e.auths, &Signed::Url(&e.url), &e.url);
                        (e.url.as_str().to_owned(), e.lifetime, e.auths.len(), v)
                    })
                    .collect(),
                Body::DaAdvert(d) => {
                    let v = verified(check.as_ref(), &d.auths, &Signed::da_advert(d), &d.url);
                    vec![(d.url.as_str().to_owned(), 0, d.auths.len(), v)]
                }
                Body::SaAdvert(s) => {
                    let v = verified(check.as_ref(), &s.auths, &Signed::sa_advert(s), &s.url);
                    vec![(s.url.as_str().to_owned(), 0, s.auths.len(), v)]
                }
                _ => vec![],
            };
            for (url, lifetime, auths, v) in found {
                if v == Some(false) {
                    continue;
                }
                // URLs compare case-sensitively (RFC 2608 §6.4); keep the first.
                if !entries.iter().any(|e| e.0 == url) {
                    entries.push((url, lifetime, auths, r.from, v));
                }
            }
        }
    }
    if ctx.json {
        outln!(
            "{}",
            json!({
                "command": "find",
                "service_type": st.as_str(),
                "entries": entries.iter().map(|(u, l, a, f, v)| json!({
                    "url": u, "lifetime": l, "auth_blocks": a, "verified": v, "from": f.to_string(),
                })).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (url, lifetime, _, _, _) in &entries {
            outln!("{url},{lifetime}");
        }
    }
    res.map(|_| ())
}

pub(super) fn attrs_output(ctx: &Ctx, target: &str, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, &format!("AttrRqst for {target}"));
    let mut lists: Vec<(&AttrList, SocketAddr, usize, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::AttrRply(a) = r.msg.body() {
                let name = format!("attributes from {}", r.from);
                let v = verified(check.as_ref(), &a.auths, &Signed::Attrs(&a.attrs), &name);
                if v != Some(false) && !lists.iter().any(|(l, ..)| *l == &a.attrs) {
                    lists.push((&a.attrs, r.from, a.auths.len(), v));
                }
            }
        }
    }
    if ctx.json {
        outln!(
            "{}",
            json!({
                "command": "attrs",
                "target": target,
                "lists": lists.iter().map(|(l, f, n, v)| json!({
                    "from": f.to_string(),
                    "attrs": l.to_string(),
                    "attributes": attrs_json(l),
                    "auth_blocks": n,
                    "verified": v,
                })).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (l, ..) in &lists {
            outln!("{l}");
        }
    }
    res.map(|_| ())
}

pub(super) fn types_output(ctx: &Ctx, outcomes: &[Outcome]) -> Result<(), Fail> {
    let res = successes(outcomes, "SrvTypeRqst");
    let mut types: Vec<String> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::SrvTypeRply(t) = r.msg.body() {
                for t in t.types.types() {
                    if !types.iter().any(|x| x.eq_ignore_ascii_case(t.as_str())) {
                        types.push(t.as_str().to_owned());
                    }
                }
            }
        }
    }
    if ctx.json {
        outln!(
            "{}",
            json!({
                "command": "types",
                "types": types,
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for t in &types {
            outln!("{t}");
        }
    }
    res.map(|_| ())
}

pub(super) fn da_json(d: &DaAdvert, r: &Reply, verified: Option<bool>) -> Value {
    json!({
        "url": d.url.as_str(),
        "scopes": scope_names(&d.scopes),
        "attrs": d.attrs.to_string(),
        "attributes": attrs_json(&d.attrs),
        "boot_timestamp": d.boot_timestamp,
        "boot_time": rfc3339(u64::from(d.boot_timestamp)),
        "going_down": d.boot_timestamp == 0,
        "mesh_enhanced": d.attrs.is_mesh_enhanced(),
        "spi_list": d.spi_list.as_str(),
        "auth_blocks": d.auths.len(),
        "verified": verified,
        "from": r.from.to_string(),
        "transport": transport(r),
    })
}

pub(super) fn das_output(ctx: &Ctx, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, "DA discovery");
    let mut das: Vec<(&DaAdvert, &Reply, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::DaAdvert(d) = r.msg.body() {
                let v = verified(check.as_ref(), &d.auths, &Signed::da_advert(d), &d.url);
                if v != Some(false) && !das.iter().any(|(x, ..)| x.url == d.url) {
                    das.push((d, r, v));
                }
            }
        }
    }
    if ctx.json {
        outln!(
            "{}",
            json!({
                "command": "das",
                "das": das.iter().map(|(d, r, v)| da_json(d, r, *v)).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (d, r, _) in &das {
            let boot = if d.boot_timestamp == 0 {
                "0 (going down)".to_owned()
            } else {
                format!(
                    "{} ({})",
                    d.boot_timestamp,
                    rfc3339(u64::from(d.boot_timestamp))
                )
            };
            outln!(
                "{} scopes={} boot={boot} mesh-enhanced={} from={} attrs={}",
                d.url,
                d.scopes,
                if d.attrs.is_mesh_enhanced() {
                    "yes"
                } else {
                    "no"
                },
                r.from,
                d.attrs
            );
        }
    }
    res.map(|_| ())
}
