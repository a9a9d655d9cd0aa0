//! Provider layer tests: recorded real streams through each decoder, every adapter end to end
//! over HTTP, the echo model and the fake provider.

#[path = "provider_echo.rs"]
mod echo;
#[path = "provider_fixtures.rs"]
pub(crate) mod fixtures;
#[path = "provider_http.rs"]
mod http;
