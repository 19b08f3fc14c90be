//! The login page, logging in and out.

use crate::jss::ui::*;

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    pub next: Option<String>,
}

pub(crate) async fn login_page(
    State(ui): Shared,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    if ui.session(&headers).is_some() {
        return Redirect::to(&safe_next(q.next.as_deref())).into_response();
    }
    let next = safe_next(q.next.as_deref());
    render(
        StatusCode::OK,
        "Log in",
        "",
        None,
        None,
        false,
        pages::login(None, &next),
    )
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginForm {
    pub token: Option<String>,
    pub next: Option<String>,
}

pub(crate) async fn login(
    State(ui): Shared,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return problem(
            StatusCode::BAD_REQUEST,
            None,
            false,
            "the login form could not be read",
        );
    };
    let next = safe_next(f.next.as_deref());
    if !same_origin(&headers) {
        return problem(
            StatusCode::FORBIDDEN,
            None,
            false,
            "the login came from another site",
        );
    }
    let token = f.token.as_deref().map(str::trim).unwrap_or_default();
    let refuse = |msg: &str| {
        render(
            StatusCode::UNAUTHORIZED,
            "Log in",
            "",
            None,
            None,
            false,
            pages::login(Some(msg), &next),
        )
    };
    if token.is_empty() {
        return refuse("Enter your token.");
    }
    // The API's own authentication: the token file, then TokenReview where enabled.
    let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) else {
        audit("-", "login", "-", "Unauthenticated", "malformed token");
        return refuse("Unknown or expired token.");
    };
    let mut h = HeaderMap::new();
    h.insert(header::AUTHORIZATION, value);
    let principal = match ui.jss.authenticate(&h).await {
        Ok(p) => p,
        Err(r) => {
            audit("-", "login", "-", r.reason(), &r.to_string());
            return refuse(if r.reason() == "Unauthenticated" {
                "Unknown or expired token."
            } else {
                "The token could not be checked now; try again."
            });
        }
    };
    let user = principal.user.clone();
    // A token TokenReview vouched for is asked again while the session lives.
    let reviewed = (!ui.jss.in_token_file(token)).then(|| token.to_string());
    let (id, _) = match ui
        .sessions
        .create(principal, reviewed, Instant::now(), SystemTime::now())
    {
        Ok(x) => x,
        Err(e) => {
            tracing::error!(error = %e, user = %user, "no session could be made");
            audit(&user, "login", "-", "Refused", &e.to_string());
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                false,
                &format!("no session could be made: {e}"),
            );
        }
    };
    audit(&user, "login", "-", "Accepted", "");
    let mut resp = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(
        &id,
        ui.sessions.ttl(),
        ui.cfg.secure_cookies,
    )) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Debug, Default, Deserialize)]
pub struct ActionForm {
    pub csrf: Option<String>,
}

pub(crate) async fn logout(
    State(ui): Shared,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let Some((id, s)) = ui.session(&headers) else {
        return Redirect::to("/ui/login").into_response();
    };
    let csrf = form.ok().and_then(|Form(f)| f.csrf);
    if let Err(why) = check_action(&headers, &s, csrf.as_deref()) {
        audit(&s.principal.user, "logout", "-", "Forbidden", why);
        return problem(StatusCode::FORBIDDEN, Some(&s), false, why);
    }
    ui.sessions.remove(&id);
    let mut resp = Redirect::to("/ui/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(ui.cfg.secure_cookies)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}
