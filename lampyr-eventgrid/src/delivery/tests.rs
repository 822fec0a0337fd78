//! Deliveries shaped as Event Grid sends them (its webhook delivery, validation and
//! CloudEvents-schema handshakes), and what each must become.

use serde_json::json;

use super::*;

const TOPIC: &str =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/lampyr/providers/Microsoft.Storage/storageAccounts/images";

fn post(content_type: &str, event_type: Option<&str>, body: &Value) -> Result<Delivery, DeliveryError> {
    parse("POST", Some(content_type), event_type, None, body.to_string().as_bytes())
}

#[test]
fn the_subscription_validation_event_is_answered_with_its_code() {
    let body = json!([{
        "id": "2d1781af-3a4c-4d7c-bd0c-e34b19da4e66",
        "topic": TOPIC,
        "subject": "",
        "data": {
            "validationCode": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6",
            "validationUrl": "https://rp-westus3.eventgrid.azure.net:553/eventsubscriptions/blobs/validate?id=1&t=2026-12-06T10:00:00Z&apiVersion=2022-06-15&token=abc",
        },
        "eventType": VALIDATION_EVENT,
        "eventTime": "2026-12-06T10:00:00.1981776Z",
        "metadataVersion": "1",
        "dataVersion": "1",
    }]);
    let expected = Delivery::Validation { code: "512d38b6-c7b8-40c8-89fe-f46f9e9622b6".into() };
    assert_eq!(post("application/json", Some("SubscriptionValidation"), &body), Ok(expected.clone()));
    assert_eq!(post("application/json; charset=utf-8", None, &body), Ok(expected), "recognised by its event type without the header");
    let no_code = json!([{ "id": "1", "topic": TOPIC, "eventType": VALIDATION_EVENT, "data": {} }]);
    assert_eq!(post("application/json", Some("SubscriptionValidation"), &no_code), Err(DeliveryError::NoValidationCode));
}

#[test]
fn the_cloudevents_abuse_protection_handshake_names_the_origin() {
    let delivery = parse("OPTIONS", None, None, Some("eventgrid.azure.net"), b"");
    assert_eq!(delivery, Ok(Delivery::AbuseProtection { origin: "eventgrid.azure.net".into() }));
    assert!(matches!(parse("OPTIONS", None, None, None, b""), Err(DeliveryError::Unsupported(_))));
    assert!(matches!(parse("GET", None, None, None, b""), Err(DeliveryError::Unsupported(_))));
}

#[test]
fn an_event_grid_schema_batch_becomes_cloudevents_in_order() {
    let body = json!([
        {
            "topic": TOPIC,
            "subject": "/blobServices/default/containers/uploads/blobs/cat.png",
            "eventType": "Microsoft.Storage.BlobCreated",
            "eventTime": "2026-12-06T10:01:02.3456789Z",
            "id": "831e1650-001e-001b-66ab-eeb76e069631",
            "data": { "api": "PutBlockList", "contentType": "image/png", "contentLength": 524288, "url": "https://images.blob.core.windows.net/uploads/cat.png" },
            "dataVersion": "",
            "metadataVersion": "1",
        },
        { "topic": TOPIC, "subject": "b", "eventType": "Microsoft.Storage.BlobDeleted", "eventTime": "2026-12-06T10:01:03Z", "id": "2", "data": {}, "dataVersion": "2", "metadataVersion": "1" },
        { "topic": TOPIC, "subject": "c", "eventType": "Microsoft.Storage.BlobCreated", "eventTime": "2026-12-06T10:01:04Z", "id": "3", "metadataVersion": "1" },
    ]);
    let Ok(Delivery::Events(events)) = post("application/json", Some("Notification"), &body) else { panic!("events") };
    assert_eq!(
        events[0],
        json!({
            "specversion": "1.0",
            "id": "831e1650-001e-001b-66ab-eeb76e069631",
            "source": TOPIC,
            "type": "Microsoft.Storage.BlobCreated",
            "subject": "/blobServices/default/containers/uploads/blobs/cat.png",
            "time": "2026-12-06T10:01:02.3456789Z",
            "datacontenttype": "application/json",
            "data": { "api": "PutBlockList", "contentType": "image/png", "contentLength": 524288, "url": "https://images.blob.core.windows.net/uploads/cat.png" },
        })
    );
    assert_eq!(events[1]["dataversion"], "2");
    assert!(events[2].get("data").is_none() && events[2].get("datacontenttype").is_none(), "no data, no content type");
    assert_eq!(
        events.iter().map(|e| e["id"].as_str().unwrap_or_default()).collect::<Vec<_>>(),
        ["831e1650-001e-001b-66ab-eeb76e069631", "2", "3"]
    );
}

#[test]
fn cloudevents_schema_deliveries_pass_through_checked() {
    let event = json!({ "specversion": "1.0", "id": "a", "source": "/x", "type": "t", "data": { "k": 1 } });
    assert_eq!(post("application/cloudevents+json; charset=utf-8", None, &event), Ok(Delivery::Events(vec![event.clone()])));
    let batch = json!([event, { "specversion": "1.0", "id": "b", "source": "/x", "type": "t" }]);
    let Ok(Delivery::Events(events)) = post("application/cloudevents-batch+json", None, &batch) else { panic!("events") };
    assert_eq!(events.len(), 2);
    let missing = json!([{ "specversion": "1.0", "id": "b", "type": "t" }]);
    let err = post("application/cloudevents-batch+json", None, &missing).expect_err("no source");
    assert_eq!(err.to_string(), "event 0: has no source (a CloudEvent needs specversion, id, source and type)");
    let old = json!({ "specversion": "0.3", "id": "b", "source": "/x", "type": "t" });
    assert!(post("application/cloudevents+json", None, &old).is_err());
}

#[test]
fn bad_deliveries_say_what_and_where() {
    assert!(matches!(parse("POST", Some("application/json"), None, None, b"{not json"), Err(DeliveryError::NotJson(_))));
    assert_eq!(post("application/json", None, &json!({ "id": "1" })), Err(DeliveryError::NotAnArray("an object")));
    let no_type = json!([{ "id": "1", "topic": TOPIC, "eventType": "t" }, { "id": "2", "topic": TOPIC }]);
    assert_eq!(post("application/json", None, &no_type).expect_err("no type").to_string(), "event 1: has no eventType");
    let number_id = json!([{ "id": 7, "topic": TOPIC, "eventType": "t" }]);
    assert_eq!(post("application/json", None, &number_id).expect_err("a number").to_string(), "event 0: id is a number, not a string");
}
