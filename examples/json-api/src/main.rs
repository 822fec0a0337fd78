//! A small JSON API with routing: a catalogue of items and an order calculator.
//!
//! - `GET /items` lists items; `GET /items/{id}` returns one, or 404
//! - `POST /orders` with `{"item": 2, "quantity": 3}` prices an order (400 on a bad body)
//! - another method on those paths: 405 with `Allow`; any other path: 404 (errors are JSON)
//!
//! Serve it in a fiber: `ly run examples/json-api`; test the handlers on the host: `cargo test`.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use lampyr_guest::json::{self, Json};
use lampyr_guest::{Error, Params, Request, Response, Router};
use serde::{Deserialize, Serialize};

/// One catalogue entry.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    id: u32,
    name: &'static str,
    price_cents: u32,
}

const ITEMS: &[Item] = &[
    Item { id: 1, name: "lantern", price_cents: 1200 },
    Item { id: 2, name: "firefly jar", price_cents: 450 },
    Item { id: 3, name: "wick", price_cents: 75 },
];

/// What `POST /orders` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Order {
    item: u32,
    quantity: u32,
}

/// What `POST /orders` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Priced {
    item: &'static Item,
    quantity: u32,
    total_cents: u64,
}

#[derive(Serialize)]
struct Catalogue {
    items: &'static [Item],
}

fn list(_req: &Request, _params: &Params) -> Json<Catalogue> {
    Json(Catalogue { items: ITEMS })
}

fn find(id: u32) -> Result<&'static Item, Error> {
    ITEMS.iter().find(|item| item.id == id).ok_or_else(|| Error::not_found("no such item"))
}

fn one(_req: &Request, params: &Params) -> Result<Json<&'static Item>, Error> {
    Ok(Json(find(params.parse("id")?)?))
}

fn order(req: &Request, _params: &Params) -> Result<Response, Error> {
    let order: Order = json::body(req)?;
    let item = find(order.item)?;
    let total_cents = u64::from(item.price_cents) * u64::from(order.quantity);
    lampyr_guest::info!("priced an order", item = item.id, quantity = order.quantity, total_cents = total_cents);
    Ok(json::response(200, &Priced { item, quantity: order.quantity, total_cents }))
}

fn handle(req: Request) -> Response {
    Router::new().get("/items", list).get("/items/{id}", one).post("/orders", order).handle(&req)
}

lampyr_guest::entry!(handle);

#[cfg(test)]
mod tests {
    use lampyr_guest::host::{body_text, header, request};

    use super::handle;

    #[test]
    fn lists_and_finds_items() {
        let all = handle(request("GET", "/items"));
        assert_eq!(all.status, 200);
        assert!(body_text(&all).starts_with(r#"{"items":[{"id":1,"name":"lantern","priceCents":1200}"#), "{}", body_text(&all));
        assert_eq!(body_text(&handle(request("GET", "/items/3"))), r#"{"id":3,"name":"wick","priceCents":75}"#);
        assert_eq!(handle(request("GET", "/items/9")).status, 404);
        assert_eq!(handle(request("GET", "/items/x")).status, 400);
    }

    #[test]
    fn prices_an_order_and_refuses_a_bad_one() {
        let mut req = request("POST", "/orders");
        req.body = br#"{"item": 2, "quantity": 3}"#.to_vec();
        let priced = handle(req.clone());
        assert_eq!(priced.status, 200);
        assert!(body_text(&priced).ends_with(r#""quantity":3,"totalCents":1350}"#), "{}", body_text(&priced));
        req.body = br#"{"item": 2}"#.to_vec();
        let bad = handle(req);
        assert_eq!(bad.status, 400);
        assert!(body_text(&bad).contains("missing field `quantity`"), "{}", body_text(&bad));
    }

    #[test]
    fn other_methods_are_405_with_allow() {
        let answer = handle(request("DELETE", "/items"));
        assert_eq!((answer.status, header(&answer, "allow")), (405, Some("GET, HEAD")));
    }
}
