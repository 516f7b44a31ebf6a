//! `svcroute slp`: an SLPv2 user agent and service agent (RFC 2608) with the
//! mesh-enhanced SA's MeshFwd (RFC 3528), over the kernel's UDP and TCP
//! sockets. A client tool, not a node: it sends one kind of request, waits
//! for the answers, prints them and exits.
//!
//! ```text
//!   args ─► validate with wire::slp (URL, attrs, scopes, predicate, tags)
//!        ─► Message ─► net: --da ADDR…   unicast UDP (retry, TCP on OVERFLOW) or TCP
//!                          --multicast   DA discovery by convergence, then the DAs;
//!                                        without DAs, convergence to the SAs
//!        ─► replies ─► text or --json; exit status from error codes
//!   --spi/--bsd/--key: sign SrvReg/SrvDeReg (RFC 2608 §9.2.1, BSD 0x8001
//!   HMAC-SHA256 or 0x8002 Ed25519), ask queries for an SPI and verify the
//!   blocks of the replies
//! ```
//!
//! Exit status: 0 success, 1 other failure (socket, broken reply), 2 bad
//! input, 3 no reply in time, 4 an agent answered with an SLP error code.
//! See `docs/slp.md`.
//!
//! Where things are: [`args`] (the command line and its parsers), [`ctx`]
//! (where requests go and what every command needs), [`net`] (UDP, TCP,
//! multicast convergence), [`auth`] (signing and checking blocks, keygen),
//! [`output`] (text and JSON), [`fail`] (errors and exit status), [`clock`];
//! the commands themselves are below.

use std::net::SocketAddr;
use std::process::ExitCode;

use serde_json::{json, Value};
use svcroute_stack::wire::slp::{
    scope::AuthorityName, url::url_service_type, AcceptId, AttrRqst, AuthBlocks, Body, ErrorCode,
    Extension, FunctionId, FwdId, MeshFwd, NamingAuthority, ScopeList, ServiceType, Signed,
    SlpString, SrvDeReg, SrvReg, SrvRqst, SrvTypeRqst, UrlEntry,
};

mod args;
mod auth;
mod clock;
mod ctx;
mod fail;
mod net;
mod output;
#[cfg(test)]
mod tests;

pub(crate) use args::SlpArgs;
use args::{
    parse_attrs, parse_predicate, parse_scopes, parse_service_type, parse_tags, parse_url, SlpCmd,
};
use auth::{keygen, unix_now};
use clock::{micros_since_1900, now_since_1970};
use ctx::{Ctx, Dest, GroupFor, Outcome};
use fail::{code_text, input, rank, Fail};
use net::NetError;
use output::{attrs_output, das_output, find_output, result_json, scope_names, types_output};

/// Runs `svcroute slp`; prints results and errors itself.
pub(crate) fn main(args: SlpArgs) -> ExitCode {
    let json = args.common.json;
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                if let Fail::Input(_) = e {
                    outln!("{}", json!({ "error": e.name(), "message": e.to_string() }));
                }
            }
            eprintln!("svcroute: slp: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

// ---------------------------------------------------------------------------
// Commands.

fn run(args: SlpArgs) -> Result<(), Fail> {
    if let SlpCmd::Keygen { out } = &args.cmd {
        return keygen(&args.common, out.as_deref());
    }
    let ctx = Ctx::new(&args.common)?;
    match args.cmd {
        SlpCmd::Register {
            url,
            lifetime,
            attrs,
            service_type,
            fresh: _,
            incremental,
            mesh_fwd,
            mesh_update,
            version_ts,
        } => {
            let url = parse_url(&url)?;
            let service_type = match service_type {
                Some(t) => parse_service_type(&t)?,
                // NOTE: parse_url checked that the URL has a well-formed type.
                None => parse_service_type(url_service_type(&url).unwrap_or_default())?,
            };
            let attrs = parse_attrs(&attrs)?;
            if incremental && mesh_fwd {
                return Err(input(
                    "--mesh-fwd goes only with a fresh registration (RFC 3528 §4.3), not --incremental; \
                     --mesh-update forwards an incremental one (svcroute extension)",
                ));
            }
            let scopes = registration_scopes(&ctx)?;
            let ext = mesh_ext(mesh_fwd || mesh_update, version_ts)?;
            // RFC 2608 §8.3, §9.2.1: the URL and the attribute list signed.
            let mut entry = UrlEntry::new(lifetime, url.clone());
            let mut attr_auths = AuthBlocks::default();
            let mut signed = None;
            if let Some(a) = &ctx.auth {
                if incremental {
                    return Err(input(
                        "a signed registration must be fresh: signatures cover all attributes (RFC 2608 §9.3)",
                    ));
                }
                let signer = a.signer()?;
                let expires = unix_now().saturating_add(a.lifetime.unwrap_or(u32::from(lifetime)));
                push_block(&mut entry.auths, signer.sign(&Signed::Url(&url), expires))?;
                push_block(
                    &mut attr_auths,
                    signer.sign(&Signed::Attrs(&attrs), expires),
                )?;
                signed = Some(a.json(expires));
            }
            let build = |scopes: ScopeList| {
                Body::SrvReg(SrvReg {
                    entry: entry.clone(),
                    service_type: service_type.clone(),
                    scopes,
                    attrs: attrs.clone(),
                    attr_auths: attr_auths.clone(),
                })
            };
            let what = format!("registration of {url}");
            update(
                &ctx,
                "register",
                &url,
                &scopes,
                !incremental,
                &ext,
                signed,
                build,
                &what,
                |agent, s| {
                    format!("registered {url} at {agent} (scopes {s}, lifetime {lifetime} s)")
                },
            )
        }
        SlpCmd::Deregister {
            url,
            tags,
            mesh_fwd,
            mesh_update,
            version_ts,
        } => {
            let url = parse_url(&url)?;
            let tags = parse_tags(&tags)?;
            if !tags.is_empty() && mesh_fwd {
                return Err(input(
                    "--mesh-fwd goes only with a complete deregistration (RFC 3528 §4.3), not --tags; \
                     --mesh-update forwards a partial one (svcroute extension)",
                ));
            }
            if mesh_update && tags.is_empty() {
                return Err(input(
                    "--mesh-update goes with --tags; use --mesh-fwd otherwise",
                ));
            }
            let scopes = registration_scopes(&ctx)?;
            let ext = mesh_ext(mesh_fwd || mesh_update, version_ts)?;
            // RFC 2608 §10.6: a URL block for each SPI registered with.
            let mut entry = UrlEntry::new(0, url.clone());
            let mut signed = None;
            if let Some(a) = &ctx.auth {
                if !tags.is_empty() {
                    return Err(input(
                        "a signed deregistration must be complete: no --tags (RFC 2608 §10.6)",
                    ));
                }
                let signer = a.signer()?;
                let expires = unix_now().saturating_add(a.lifetime.unwrap_or(600));
                push_block(&mut entry.auths, signer.sign(&Signed::Url(&url), expires))?;
                signed = Some(a.json(expires));
            }
            let build = |scopes: ScopeList| {
                Body::SrvDeReg(SrvDeReg {
                    scopes,
                    entry: entry.clone(),
                    tags: tags.clone(),
                })
            };
            let what = format!("deregistration of {url}");
            let t = tags.as_raw().to_owned();
            update(
                &ctx,
                "deregister",
                &url,
                &scopes,
                false,
                &ext,
                signed,
                build,
                &what,
                |agent, s| {
                    if t.is_empty() {
                        format!("deregistered {url} at {agent} (scopes {s})")
                    } else {
                        format!("deregistered attributes {t} of {url} at {agent} (scopes {s})")
                    }
                },
            )
        }
        SlpCmd::Find {
            service_type,
            predicate,
        } => {
            let st = parse_service_type(&service_type)?;
            let predicate = parse_predicate(&predicate)?;
            let scopes = ctx.scopes_or_default()?;
            let body = Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: st.clone(),
                scopes,
                predicate,
                spi: ctx.spi(),
            });
            let expect = [
                FunctionId::SrvRply,
                FunctionId::DaAdvert,
                FunctionId::SaAdvert,
            ];
            let group = if st.as_str().eq_ignore_ascii_case("service:directory-agent") {
                GroupFor::DaDiscovery
            } else {
                GroupFor::SrvRqst(st.as_str())
            };
            let outcomes = ctx.query(body, &expect, &group)?;
            find_output(&ctx, &st, &outcomes)
        }
        SlpCmd::Attrs { target, tags } => {
            if ServiceType::parse(&target).is_err() || target.contains("://") {
                parse_url(&target)?;
            }
            let url = SlpString::new(target.clone()).map_err(|_| input("URL too long"))?;
            let tags = parse_tags(&tags)?;
            let body = Body::AttrRqst(AttrRqst {
                pr_list: SlpString::default(),
                url,
                scopes: ctx.scopes_or_default()?,
                tags,
                spi: ctx.spi(),
            });
            let outcomes = ctx.query(body, &[FunctionId::AttrRply], &GroupFor::Svrloc)?;
            attrs_output(&ctx, &target, &outcomes)
        }
        SlpCmd::Types { na } => {
            let naming_authority = match na.as_deref() {
                None | Some("") => NamingAuthority::Iana,
                Some("*") => NamingAuthority::All,
                Some(n) => NamingAuthority::Named(AuthorityName::new(n).map_err(|_| {
                    input(format!(
                        "bad naming authority '{n}': want a name without reserved characters, or *"
                    ))
                })?),
            };
            let body = Body::SrvTypeRqst(SrvTypeRqst {
                pr_list: SlpString::default(),
                naming_authority,
                scopes: ctx.scopes_or_default()?,
            });
            let outcomes = ctx.query(body, &[FunctionId::SrvTypeRply], &GroupFor::Svrloc)?;
            types_output(&ctx, &outcomes)
        }
        SlpCmd::Das { predicate } => {
            let predicate = parse_predicate(&predicate)?;
            // Default: every DA, whatever its scopes (RFC 2608 §6, NO SCOPE).
            let scopes = match &ctx.scopes {
                Some(s) => parse_scopes(s)?,
                None => ScopeList::default(),
            };
            let outcomes = match &ctx.dest {
                Dest::Multicast { v6, group } => ctx
                    .discover(*v6, *group, &scopes, &predicate, ctx.spi())?
                    .into_iter()
                    .map(|r| Outcome {
                        agent: r.from,
                        result: Ok(r),
                    })
                    .collect(),
                Dest::Das(_) => {
                    let body = Body::SrvRqst(SrvRqst {
                        pr_list: SlpString::default(),
                        service_type: ServiceType::directory_agent(),
                        scopes,
                        predicate,
                        spi: ctx.spi(),
                    });
                    let expect = [FunctionId::DaAdvert, FunctionId::SrvRply];
                    ctx.query(body, &expect, &GroupFor::DaDiscovery)?
                }
            };
            das_output(&ctx, &outcomes)
        }
        SlpCmd::Keygen { .. } => Ok(()),
    }
}

fn push_block(
    blocks: &mut AuthBlocks,
    b: svcroute_stack::wire::slp::AuthBlock,
) -> Result<(), Fail> {
    blocks
        .push(b)
        .map_err(|_| input("too many authentication blocks"))
}

fn registration_scopes(ctx: &Ctx) -> Result<ScopeList, Fail> {
    let scopes = ctx.scopes_or_default()?;
    if scopes.is_empty() {
        return Err(input(
            "--scopes must name at least one scope to register in",
        ));
    }
    Ok(scopes)
}

/// MeshFwd RqstFwd (RFC 3528 §4.3): version timestamp, accept timestamp 0,
/// no accept DA URL yet.
fn mesh_ext(mesh_fwd: bool, version_ts: Option<u64>) -> Result<Vec<Extension>, Fail> {
    if !mesh_fwd {
        if version_ts.is_some() {
            return Err(input("--version-ts goes with --mesh-fwd or --mesh-update"));
        }
        return Ok(vec![]);
    }
    Ok(vec![Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version: version_ts.unwrap_or_else(|| micros_since_1900(now_since_1970())),
        accept: AcceptId::default(),
    })])
}

/// SrvReg / SrvDeReg to every target; every one must acknowledge with 0
/// (an SA registers consistently with all DAs, RFC 2608 §8.3).
#[allow(clippy::too_many_arguments)]
fn update(
    ctx: &Ctx,
    op: &str,
    url: &SlpString,
    scopes: &ScopeList,
    fresh: bool,
    ext: &[Extension],
    signed: Option<Value>,
    build: impl Fn(ScopeList) -> Body,
    what: &str,
    done: impl Fn(SocketAddr, &ScopeList) -> String,
) -> Result<(), Fail> {
    let targets = ctx.registration_targets(scopes)?;
    let mut rows = Vec::new();
    let mut worst: Option<Fail> = None;
    for (agent, scopes) in targets {
        let req = ctx.message(build(scopes.clone()), fresh, ext.to_vec())?;
        let result = ctx.net.unicast(agent, &req, &[FunctionId::SrvAck]);
        let mut row = result_json(agent, &result);
        row["xid"] = json!(req.header().xid);
        row["scopes"] = json!(scope_names(&scopes));
        rows.push(row);
        let fail = match result {
            Ok(r) => match r.msg.body().error() {
                Some(ErrorCode::Ok) => {
                    if !ctx.json {
                        outln!("{}", done(agent, &scopes));
                    }
                    None
                }
                Some(code) => Some(Fail::Refused(format!(
                    "{agent} refused the {what}: {}",
                    code_text(code)
                ))),
                None => Some(Fail::Other(format!("{agent}: reply without an error code"))),
            },
            Err(NetError::NoReply(s)) => Some(Fail::NoReply(s)),
            Err(NetError::Other(e)) => Some(Fail::Other(format!("{e:#}"))),
        };
        if let Some(f) = fail {
            if worst.as_ref().is_some_and(|w| rank(w) >= rank(&f)) {
                eprintln!("svcroute: slp: {f}");
            } else {
                if let Some(w) = worst.take() {
                    eprintln!("svcroute: slp: {w}");
                }
                worst = Some(f);
            }
        }
    }
    if ctx.json {
        let mut out = json!({
            "command": op,
            "url": url.as_str(),
            "results": rows,
        });
        if let Some(Extension::MeshFwd(m)) = ext.first() {
            out["mesh_fwd"] = json!({ "fwd_id": "RqstFwd", "version_timestamp": m.version });
        }
        if let Some(s) = signed {
            out["auth"] = s;
        }
        outln!("{out}");
    }
    worst.map_or(Ok(()), Err)
}
